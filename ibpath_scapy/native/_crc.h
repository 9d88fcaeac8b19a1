/* The CRCs of InfiniBand packets (crc.py, crcspec): a reflected CRC of up to 32 bits by its
 * slicing-by-8 tables (crc.crc_table: the byte-at-a-time table, then table k what k more
 * zero bytes make of its entries, so that eight bytes take one step), with the variant
 * fields taken as ones. Shared by the module's C files (_scan.c, _mad.c). */
#ifndef IBPATH_CRC_H
#define IBPATH_CRC_H

#include <stdint.h>

enum { CRC_TABLE_WORDS = 8 * 256 };

static inline uint32_t crc_byte(const uint32_t *t, uint32_t reg, unsigned char b)
{
    return t[(reg ^ b) & 0xFF] ^ (reg >> 8);
}

static inline uint32_t crc_run(const uint32_t *t, uint32_t reg, const unsigned char *d,
                               Py_ssize_t n)
{
    for (; n >= 8; d += 8, n -= 8) {
        uint32_t lo = reg ^ ((uint32_t)d[0] | (uint32_t)d[1] << 8 | (uint32_t)d[2] << 16
                             | (uint32_t)d[3] << 24);
        uint32_t hi = (uint32_t)d[4] | (uint32_t)d[5] << 8 | (uint32_t)d[6] << 16
                      | (uint32_t)d[7] << 24;
        reg = t[7 * 256 + (lo & 0xFF)] ^ t[6 * 256 + (lo >> 8 & 0xFF)]
              ^ t[5 * 256 + (lo >> 16 & 0xFF)] ^ t[4 * 256 + (lo >> 24)]
              ^ t[3 * 256 + (hi & 0xFF)] ^ t[2 * 256 + (hi >> 8 & 0xFF)]
              ^ t[1 * 256 + (hi >> 16 & 0xFF)] ^ t[hi >> 24];
    }
    for (; n > 0; d++, n--)
        reg = crc_byte(t, reg, *d);
    return reg;
}

/* The CRC over prefix, then the n bytes at d with mask ORed into their first bytes. */
static inline uint32_t crc_masked(const uint32_t *t, uint32_t init, uint32_t xorout,
                                  const unsigned char *prefix, Py_ssize_t plen,
                                  const unsigned char *mask, Py_ssize_t mlen,
                                  const unsigned char *d, Py_ssize_t n)
{
    uint32_t reg = crc_run(t, init, prefix, plen);
    Py_ssize_t k = mlen < n ? mlen : n;
    for (Py_ssize_t i = 0; i < k; i++)
        reg = crc_byte(t, reg, d[i] | mask[i]);
    return crc_run(t, reg, d + k, n - k) ^ xorout;
}

#endif

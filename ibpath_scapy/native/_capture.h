/* The capture records the readers' C loops read (pcapio's _REC_HDR and _EPB_HEAD): a
 * classic pcap record header, and a pcapng enhanced packet block up to its packet. The
 * module exports the header sizes (REC_HDR, EPB_DATA) and tests/test_native_scan.py holds
 * them to pcapio's. */
#ifndef IBPATH_CAPTURE_H
#define IBPATH_CAPTURE_H

#include <stdint.h>

/* pcap record: seconds, fraction, captured length, original length, then the packet */
enum { REC_SEC = 0, REC_FRAC = 4, REC_INCL = 8, REC_HDR = 16 };
/* EPB: type, total length, interface, timestamp (high, low), captured length, original
 * length, then the packet */
enum { EPB_TYPE = 0, EPB_LEN = 4, EPB_IFACE = 8, EPB_TS_HI = 12, EPB_TS_LO = 16,
       EPB_INCL = 20, EPB_DATA = 28 };

static inline uint32_t u32(const unsigned char *p, int little)
{
    return little ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
                  : (uint32_t)p[3] | (uint32_t)p[2] << 8 | (uint32_t)p[1] << 16 | (uint32_t)p[0] << 24;
}

#endif

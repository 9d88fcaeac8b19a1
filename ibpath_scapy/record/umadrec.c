/*
 * umadrec.c - LD_PRELOAD recorder for /dev/infiniband/umad* traffic.
 *
 * Part of ibpath (ibpath_scapy/record).  Compiled at run time by
 * ibpath_scapy.record.umad with
 *     cc -O2 -shared -fPIC -o umadrec.so umadrec.c -ldl
 * into a cache directory; never committed as a binary.
 *
 * Preload it BEFORE libumad2sim.so:
 *     LD_PRELOAD=/path/umadrec.so:/usr/lib/<triplet>/umad2sim/libumad2sim.so
 * so that libibumad's open/read/write/close/poll land here first.  Every call
 * is forwarded to the next definition (dlsym(RTLD_NEXT)), i.e. umad2sim, which
 * forwards to libc.  Without umad2sim it works the same on a kernel umad fd.
 *
 * 1. Recording ($UMADREC_LOG).  For each fd that open()/open64()/openat()
 *    returned for a path starting with "/dev/infiniband/umad", every
 *    successful write() and read() buffer (struct ib_user_mad: 64-byte header
 *    + MAD, exactly as libibumad passes it) is appended to $UMADREC_LOG as one
 *    record (all integers little-endian):
 *
 *      off size field
 *      0   4    magic "UMR1"
 *      4   1    direction: 'W' = written (sent by this process),
 *                          'R' = read (received by this process)
 *      5   1    flags: 0x01 = this read was served from the SAR side channel
 *                             (see 2.) instead of the bytes umad2sim returned
 *                      0x02 = bytes umad2sim returned for a read that was then
 *                             replaced by the side channel (kept as evidence;
 *                             not what the application saw)
 *      6   2    reserved (0)
 *      8   4    fd
 *      12  4    pid
 *      16  8    tv_sec   (CLOCK_REALTIME)
 *      24  4    tv_nsec
 *      28  4    length of the buffer that follows
 *      32  len  the buffer (written: as passed to write(); read: as returned)
 *
 *    Each record goes out in one write(2) on an O_APPEND fd, so several
 *    processes may share a log.
 *
 * 2. Kernel-SAR emulation ($UMADREC_SAR_DIR, optional).  ibsim has no RMPP:
 *    umad2sim forwards only the first 256 bytes of a write, and (ibsim 0.10)
 *    its receive path keeps only ~224 intact MAD bytes.  A kernel would
 *    segment a long SA response with RMPP and hand the receiver the
 *    reassembled message.  To let the client print what the SA really sent,
 *    the sender's shim stores every SA-class (0x03) response it writes in
 *    $UMADREC_SAR_DIR/<TID as 16 hex digits>.umad, and the receiver's shim,
 *    when umad2sim delivers an SA response with that TID, returns the stored
 *    MAD (behind the 64-byte umad header umad2sim produced, with its length
 *    field set to the full size) -- including the kernel's -ENOSPC protocol
 *    when the reader's buffer is too small (the header is returned, errno =
 *    ENOSPC, and the full message is served on the next read; poll() reports
 *    such an fd readable).  Only the delivery to the client is emulated; the
 *    recorded writes are untouched.
 *
 * 3. Deterministic TIDs ($UMADREC_SEED, optional).  libibmad seeds its TID
 *    generator with srandom(time * pid); when $UMADREC_SEED is set,
 *    srandom() is called with that value instead, so reruns give the same
 *    TIDs.
 *
 * Without any of the variables set the shim is a pure pass-through.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define UMAD_PREFIX "/dev/infiniband/umad"
#define MAX_TRACKED 64
#define UMAD_HDR 64		/* struct ib_user_mad header with pkey_index */
#define UMAD_LEN_OFF 16		/* offset of ib_user_mad.length */
#define MAD_CLASS_SA 0x03
#define MAX_SAR_MSG (1 << 20)

#define F_SAR_SERVED 0x01
#define F_SAR_REPLACED 0x02

static int (*next_open)(const char *, int, ...);
static int (*next_open64)(const char *, int, ...);
static int (*next_openat)(int, const char *, int, ...);
static int (*next_close)(int);
static ssize_t (*next_read)(int, void *, size_t);
static ssize_t (*next_write)(int, const void *, size_t);
static int (*next_poll)(struct pollfd *, nfds_t, int);
static void (*next_srandom)(unsigned int);

struct tracked_fd {
	int fd;
	unsigned char *pending;	/* full umad waiting after -ENOSPC */
	size_t pending_len;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tracked_fd tracked[MAX_TRACKED];
static int ntracked;
static int log_fd = -2;		/* -2: not yet opened, -1: disabled */

static void resolve(void)
{
	if (!next_open)
		next_open = dlsym(RTLD_NEXT, "open");
	if (!next_open64)
		next_open64 = dlsym(RTLD_NEXT, "open64");
	if (!next_openat)
		next_openat = dlsym(RTLD_NEXT, "openat");
	if (!next_close)
		next_close = dlsym(RTLD_NEXT, "close");
	if (!next_read)
		next_read = dlsym(RTLD_NEXT, "read");
	if (!next_write)
		next_write = dlsym(RTLD_NEXT, "write");
	if (!next_poll)
		next_poll = dlsym(RTLD_NEXT, "poll");
	if (!next_srandom)
		next_srandom = dlsym(RTLD_NEXT, "srandom");
}

static int is_umad_path(const char *path)
{
	return path && !strncmp(path, UMAD_PREFIX, sizeof(UMAD_PREFIX) - 1);
}

/* callers hold lock */
static struct tracked_fd *find_locked(int fd)
{
	int i;

	for (i = 0; i < ntracked; i++)
		if (tracked[i].fd == fd)
			return &tracked[i];
	return NULL;
}

static void track(int fd)
{
	if (fd < 0)
		return;
	pthread_mutex_lock(&lock);
	if (!find_locked(fd) && ntracked < MAX_TRACKED) {
		tracked[ntracked].fd = fd;
		tracked[ntracked].pending = NULL;
		tracked[ntracked].pending_len = 0;
		ntracked++;
	}
	pthread_mutex_unlock(&lock);
}

static void untrack(int fd)
{
	struct tracked_fd *t;

	pthread_mutex_lock(&lock);
	t = find_locked(fd);
	if (t) {
		free(t->pending);
		*t = tracked[--ntracked];
	}
	pthread_mutex_unlock(&lock);
}

static int is_tracked(int fd)
{
	int r;

	pthread_mutex_lock(&lock);
	r = find_locked(fd) != NULL;
	pthread_mutex_unlock(&lock);
	return r;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = v; p[1] = v >> 8; p[2] = v >> 16; p[3] = v >> 24;
}

static void put64(unsigned char *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

/* Plain syscalls so that we never recurse into our own wrappers. */
static int raw_write_all(int fd, const unsigned char *p, size_t n)
{
	while (n) {
		long r = syscall(SYS_write, fd, p, n);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

static void log_buf(char dir, unsigned flags, int fd, const void *buf, size_t len)
{
	struct timespec ts;
	unsigned char *rec;
	int saved_errno = errno;

	pthread_mutex_lock(&log_lock);
	if (log_fd == -2) {
		const char *name = getenv("UMADREC_LOG");
		log_fd = -1;
		if (name && *name)
			log_fd = (int)syscall(SYS_openat, AT_FDCWD, name,
					      O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
					      0644);
		if (log_fd < 0)
			log_fd = -1;
	}
	if (log_fd < 0)
		goto out;
	rec = malloc(32 + len);
	if (!rec)
		goto out;
	clock_gettime(CLOCK_REALTIME, &ts);
	memcpy(rec, "UMR1", 4);
	rec[4] = (unsigned char)dir;
	rec[5] = (unsigned char)flags;
	rec[6] = rec[7] = 0;
	put32(rec + 8, (uint32_t)fd);
	put32(rec + 12, (uint32_t)getpid());
	put64(rec + 16, (uint64_t)ts.tv_sec);
	put32(rec + 24, (uint32_t)ts.tv_nsec);
	put32(rec + 28, (uint32_t)len);
	memcpy(rec + 32, buf, len);
	raw_write_all(log_fd, rec, 32 + len);
	free(rec);
out:
	pthread_mutex_unlock(&log_lock);
	errno = saved_errno;
}

/* ---- SAR side channel ------------------------------------------------ */

static const char *sar_dir(void)
{
	const char *d = getenv("UMADREC_SAR_DIR");
	return (d && *d) ? d : NULL;
}

static int is_sa_response(const unsigned char *umad, size_t len)
{
	return len >= UMAD_HDR + 24 && umad[UMAD_HDR + 1] == MAD_CLASS_SA &&
	       (umad[UMAD_HDR + 3] & 0x80);
}

static void sar_name(char *out, size_t size, const char *dir,
		     const unsigned char *umad, const char *suffix)
{
	const unsigned char *tid = umad + UMAD_HDR + 8;

	snprintf(out, size, "%s/%02x%02x%02x%02x%02x%02x%02x%02x%s", dir,
		 tid[0], tid[1], tid[2], tid[3], tid[4], tid[5], tid[6], tid[7],
		 suffix);
}

static void sar_store(const void *buf, size_t len)
{
	char tmp[4096], name[4096];
	const char *dir = sar_dir();
	int fd;

	if (!dir || !is_sa_response(buf, len) || len > MAX_SAR_MSG)
		return;
	sar_name(tmp, sizeof(tmp), dir, buf, ".tmp");
	sar_name(name, sizeof(name), dir, buf, ".umad");
	fd = (int)syscall(SYS_openat, AT_FDCWD, tmp,
			  O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (raw_write_all(fd, buf, len) < 0) {
		syscall(SYS_close, fd);
		syscall(SYS_unlinkat, AT_FDCWD, tmp, 0);
		return;
	}
	syscall(SYS_close, fd);
	syscall(SYS_renameat, AT_FDCWD, tmp, AT_FDCWD, name);
}

/* Returns a malloc'ed full umad (header from `got`, MAD from the store) or NULL. */
static unsigned char *sar_fetch(const unsigned char *got, size_t got_len,
				size_t *out_len)
{
	char name[4096];
	const char *dir = sar_dir();
	unsigned char *full;
	struct stat st;
	size_t total;
	long n;
	int fd;

	if (!dir || !is_sa_response(got, got_len))
		return NULL;
	sar_name(name, sizeof(name), dir, got, ".umad");
	fd = (int)syscall(SYS_openat, AT_FDCWD, name, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || st.st_size <= UMAD_HDR ||
	    st.st_size > MAX_SAR_MSG) {
		syscall(SYS_close, fd);
		return NULL;
	}
	total = (size_t)st.st_size;
	full = malloc(total);
	if (!full) {
		syscall(SYS_close, fd);
		return NULL;
	}
	n = syscall(SYS_pread64, fd, full, total, 0);
	syscall(SYS_close, fd);
	if (n != (long)total) {
		free(full);
		return NULL;
	}
	syscall(SYS_unlinkat, AT_FDCWD, name, 0);
	/* the receiver's own umad header (addressing as delivered to it) */
	memcpy(full, got, UMAD_HDR);
	put32(full + UMAD_LEN_OFF, (uint32_t)total);
	*out_len = total;
	return full;
}

/* Serve `full` into buf: whole message, or header + -ENOSPC (keeps it pending). */
static ssize_t serve(struct tracked_fd *t, unsigned char *full, size_t full_len,
		     void *buf, size_t count)
{
	if (full_len <= count) {
		memcpy(buf, full, full_len);
		free(full);
		if (t && t->pending == full) {
			t->pending = NULL;
			t->pending_len = 0;
		}
		return (ssize_t)full_len;
	}
	if (count >= UMAD_HDR)
		memcpy(buf, full, UMAD_HDR);
	if (t) {
		t->pending = full;
		t->pending_len = full_len;
	} else
		free(full);
	errno = ENOSPC;
	return -1;
}

/* ---- wrappers ---------------------------------------------------------- */

static mode_t get_mode(int flags, va_list ap)
{
#ifdef O_TMPFILE
	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
#else
	if (flags & O_CREAT)
#endif
		return (mode_t)va_arg(ap, int);
	return 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;
	int fd;

	resolve();
	va_start(ap, flags);
	mode = get_mode(flags, ap);
	va_end(ap);
	fd = next_open(path, flags, mode);
	if (is_umad_path(path))
		track(fd);
	return fd;
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;
	int fd;

	resolve();
	va_start(ap, flags);
	mode = get_mode(flags, ap);
	va_end(ap);
	fd = next_open64(path, flags, mode);
	if (is_umad_path(path))
		track(fd);
	return fd;
}

int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;
	int fd;

	resolve();
	va_start(ap, flags);
	mode = get_mode(flags, ap);
	va_end(ap);
	fd = next_openat(dirfd, path, flags, mode);
	if (is_umad_path(path))
		track(fd);
	return fd;
}

int close(int fd)
{
	resolve();
	untrack(fd);
	return next_close(fd);
}

ssize_t read(int fd, void *buf, size_t count)
{
	unsigned char *full, *pending = NULL;
	size_t full_len = 0, pending_len = 0;
	struct tracked_fd *t;
	ssize_t r;

	resolve();
	pthread_mutex_lock(&lock);
	t = find_locked(fd);
	if (t && t->pending) {
		pending = t->pending;
		pending_len = t->pending_len;
	}
	pthread_mutex_unlock(&lock);
	if (!t)
		return next_read(fd, buf, count);

	if (pending) {
		pthread_mutex_lock(&lock);
		t = find_locked(fd);
		r = serve(t, pending, pending_len, buf, count);
		pthread_mutex_unlock(&lock);
		if (r > 0)
			log_buf('R', F_SAR_SERVED, fd, buf, (size_t)r);
		return r;
	}

	r = next_read(fd, buf, count);
	if (r <= 0)
		return r;
	full = sar_fetch(buf, (size_t)r, &full_len);
	if (!full) {
		log_buf('R', 0, fd, buf, (size_t)r);
		return r;
	}
	log_buf('R', F_SAR_REPLACED, fd, buf, (size_t)r);
	pthread_mutex_lock(&lock);
	t = find_locked(fd);
	r = serve(t, full, full_len, buf, count);
	pthread_mutex_unlock(&lock);
	if (r > 0)
		log_buf('R', F_SAR_SERVED, fd, buf, (size_t)r);
	return r;
}

ssize_t write(int fd, const void *buf, size_t count)
{
	ssize_t r;

	resolve();
	if (!is_tracked(fd))
		return next_write(fd, buf, count);
	/* Store before sending so the peer finds it when the MAD arrives. */
	sar_store(buf, count);
	r = next_write(fd, buf, count);
	if (r > 0)
		log_buf('W', 0, fd, buf, count);
	return r;
}

int poll(struct pollfd *pfds, nfds_t nfds, int timeout)
{
	nfds_t i;
	int ready = 0;

	resolve();
	pthread_mutex_lock(&lock);
	for (i = 0; i < nfds; i++) {
		struct tracked_fd *t = find_locked(pfds[i].fd);
		if (t && t->pending && (pfds[i].events & POLLIN)) {
			pfds[i].revents = POLLIN;
			ready++;
		}
	}
	pthread_mutex_unlock(&lock);
	if (ready) {
		for (i = 0; i < nfds; i++) {
			struct tracked_fd *t;
			pthread_mutex_lock(&lock);
			t = find_locked(pfds[i].fd);
			if (!(t && t->pending && (pfds[i].events & POLLIN)))
				pfds[i].revents = 0;
			pthread_mutex_unlock(&lock);
		}
		return ready;
	}
	return next_poll(pfds, nfds, timeout);
}

void srandom(unsigned int seed)
{
	const char *s = getenv("UMADREC_SEED");

	resolve();
	if (s && *s)
		seed = (unsigned int)strtoul(s, NULL, 0);
	next_srandom(seed);
}

/*
 * ibpathrec.c - LD_PRELOAD recorder behind `ibpath record -- CMD`.
 *
 * Records, from inside the process, what it says to the RDMA stack:
 *   - every write() to an fd opened on /dev/infiniband/rdma_cm (one ucma command,
 *     struct rdma_ucm_cmd_hdr + command, include/uapi/rdma/rdma_user_cm.h), with its
 *     return value and errno; for SET_OPTION level RDMA_OPTION_IB, optname
 *     RDMA_OPTION_IB_PATH the optval[optlen] bytes from the caller's memory (the path
 *     array); for CREATE_ID, QUERY and GET_EVENT the response the kernel wrote back;
 *   - every MAD written to or read from /dev/infiniband/umad* (struct ib_user_mad,
 *     include/uapi/rdma/ib_user_mad.h);
 *   - what is sent and received on sockets connected to ibacm (AF_UNIX at the paths of
 *     $IBPATHREC_ACM_SOCKETS, or TCP to port $IBPATHREC_ACM_PORT) and on sockets accepted
 *     from listeners bound there;
 *   - what is sent and received on AF_NETLINK sockets of protocol NETLINK_RDMA (20).
 *
 * Records go to the spool $IBPATHREC_SPOOL (opened O_APPEND; one write() per call, so
 * processes sharing it never interleave inside a record).  Each record is a packed header
 * (IPR_HDR_SIZE bytes, host order; layout and constants come from
 * ibpath_scapy/record/spool.py as -D options, the one definition both sides use) and then
 * `length` bytes.  A ucma call whose response or optval is recorded is two records written
 * in one write(): the call, then the extra part.
 *
 * Rules: return values and errno pass through untouched; caller memory is copied with
 * process_vm_readv, so a bad pointer costs a flag, never a fault; what a call hands in is
 * copied before the call into the thread's buffer (two parts of $IBPATHREC_MAX_RECORD
 * bytes, allocated once per thread that records, freed when it exits), what it gets back
 * after; one mutex guards the spool and its bounded static buffer; pthread_atfork keeps
 * the mutex sane across fork and the child records under its own pid; exec'd children
 * inherit LD_PRELOAD and the spool path through the environment, and find what their
 * inherited fds are in /proc/self/fd.  Caps: $IBPATHREC_MAX_RECORD bytes per part
 * (flag TRUNCATED, original length kept) and $IBPATHREC_MAX_TOTAL bytes per run (spool size,
 * a NOTE record when reached).  A recorder failure stops recording in that process and says
 * so once on stderr; the program keeps running, and every record it could not write is
 * counted in $IBPATHREC_LOST (a page ibpath record makes and turns into notes; the spool
 * keeps whole records only).  Signals are blocked while the spool lock is held, so a signal
 * handler that writes to a tracked fd never waits for its own thread; a call such a handler
 * makes while its thread is recording another is recorded on the second level of the
 * thread's buffer (a third level, a handler interrupted by a handler, is a note).
 *
 * Not seen: static binaries (no LD_PRELOAD), raw syscalls and libc-internal calls that do
 * not go through the exported write()/read()/send*()/recv*() symbols.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <linux/netlink.h>
#include <rdma/ib_user_mad.h>
#include <rdma/rdma_user_cm.h>

#if !defined(IPR_MAGIC) || !defined(IPR_HDR_SIZE) || !defined(IPR_KIND_UCMA) || \
	!defined(IPR_BUF_MAX)
#error "compile through ibpath_scapy.record.shim, which passes the spool format as -D options"
#endif

#define RDMA_CM_PATH "/dev/infiniband/rdma_cm"
#define UMAD_PREFIX "/dev/infiniband/umad"
#define IPR_MAX_FDS 65536
#define DEFAULT_ACM_SOCKETS "/run/ibacm-unix.sock:/run/ibacm.sock:/var/run/ibacm.sock"
#define DEFAULT_ACM_PORT 6125
#define KIND_ACM_LISTEN 0x80		/* fd table only: a listener whose accepts are ACM */

struct ipr_hdr {
	char magic[4];
	uint8_t kind;
	uint8_t part;
	uint16_t flags;
	uint32_t pid;
	uint32_t tid;
	int32_t fd;
	uint32_t aux;
	int64_t ts_ns;
	int64_t rc;
	int32_t err;
	uint32_t length;
	uint32_t orig_length;
} __attribute__((packed));

_Static_assert(sizeof(struct ipr_hdr) == IPR_HDR_SIZE, "spool header differs from spool.py");

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_read)(int, void *, size_t);
static int (*real_open)(const char *, int, ...);
static int (*real_open64)(const char *, int, ...);
static int (*real_openat)(int, const char *, int, ...);
static int (*real_openat64)(int, const char *, int, ...);
static int (*real_open_2)(const char *, int);
static int (*real_open64_2)(const char *, int);
static int (*real_openat_2)(int, const char *, int);
static int (*real_openat64_2)(int, const char *, int);
static int (*real_close)(int);
static int (*real_close_range)(unsigned int, unsigned int, int);
static int (*real_dup)(int);
static int (*real_dup2)(int, int);
static int (*real_dup3)(int, int, int);
static int (*real_fcntl)(int, int, ...);
static int (*real_fcntl64)(int, int, ...);
static int (*real_socket)(int, int, int);
static int (*real_connect)(int, const struct sockaddr *, socklen_t);
static int (*real_bind)(int, const struct sockaddr *, socklen_t);
static int (*real_accept)(int, struct sockaddr *, socklen_t *);
static int (*real_accept4)(int, struct sockaddr *, socklen_t *, int);
static ssize_t (*real_send)(int, const void *, size_t, int);
static ssize_t (*real_sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
static ssize_t (*real_sendmsg)(int, const struct msghdr *, int);
static ssize_t (*real_recv)(int, void *, size_t, int);
static ssize_t (*real_recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
static ssize_t (*real_recvmsg)(int, struct msghdr *, int);

static unsigned char fd_kind[IPR_MAX_FDS];

static pthread_mutex_t spool_lock = PTHREAD_MUTEX_INITIALIZER;
static int spool_fd = -2;		/* -2: open on first record; -1: recording off */
static int failed;			/* said so on stderr */
static int run_cap_noted;
static size_t max_record = IPR_DEFAULT_MAX_RECORD;
static long long max_total = IPR_DEFAULT_MAX_TOTAL;
static unsigned char buf[2 * (IPR_HDR_SIZE + IPR_BUF_MAX)];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_key_t tbuf_key;		/* frees a thread's copy buffer when it exits */
static int inited;			/* every real_* resolved */
static int fail_err;			/* errno of the failure that stopped recording */

/*
 * The spool lock, taken with every signal blocked: a signal handler may call write() (it is
 * async-signal-safe) on a tracked fd, and would otherwise wait for the lock its own thread
 * holds.  The signal comes once the lock is given back.
 */
static void lock_spool(sigset_t *old)
{
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, old);
	pthread_mutex_lock(&spool_lock);
}

static void unlock_spool(const sigset_t *old)
{
	pthread_mutex_unlock(&spool_lock);
	pthread_sigmask(SIG_SETMASK, old, NULL);
}

#define RESOLVE(var, name) ((var) = dlsym(RTLD_NEXT, name))

static void init(void)
{
	const char *s;

	RESOLVE(real_write, "write");
	RESOLVE(real_writev, "writev");
	RESOLVE(real_read, "read");
	RESOLVE(real_open, "open");
	RESOLVE(real_open64, "open64");
	RESOLVE(real_openat, "openat");
	RESOLVE(real_openat64, "openat64");
	RESOLVE(real_open_2, "__open_2");
	RESOLVE(real_open64_2, "__open64_2");
	RESOLVE(real_openat_2, "__openat_2");
	RESOLVE(real_openat64_2, "__openat64_2");
	RESOLVE(real_close, "close");
	RESOLVE(real_close_range, "close_range");
	RESOLVE(real_dup, "dup");
	RESOLVE(real_dup2, "dup2");
	RESOLVE(real_dup3, "dup3");
	RESOLVE(real_fcntl, "fcntl");
	RESOLVE(real_fcntl64, "fcntl64");
	RESOLVE(real_socket, "socket");
	RESOLVE(real_connect, "connect");
	RESOLVE(real_bind, "bind");
	RESOLVE(real_accept, "accept");
	RESOLVE(real_accept4, "accept4");
	RESOLVE(real_send, "send");
	RESOLVE(real_sendto, "sendto");
	RESOLVE(real_sendmsg, "sendmsg");
	RESOLVE(real_recv, "recv");
	RESOLVE(real_recvfrom, "recvfrom");
	RESOLVE(real_recvmsg, "recvmsg");
	s = getenv("IBPATHREC_MAX_RECORD");
	if (s && *s) {
		max_record = strtoul(s, NULL, 0);
		if (max_record > IPR_BUF_MAX)
			max_record = IPR_BUF_MAX;
	}
	s = getenv("IBPATHREC_MAX_TOTAL");
	if (s && *s)
		max_total = strtoll(s, NULL, 0);
	pthread_key_create(&tbuf_key, free);
	__atomic_store_n(&inited, 1, __ATOMIC_RELEASE);
}

static inline void ensure_init(void)
{
	if (__builtin_expect(!__atomic_load_n(&inited, __ATOMIC_ACQUIRE), 0))
		pthread_once(&init_once, init);
}

static __thread pid_t cached_tid;
static pid_t cached_pid;	/* both forgotten in a forked child (atfork_child) */

static pid_t my_pid(void)
{
	pid_t p = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);

	if (!p) {
		p = getpid();
		__atomic_store_n(&cached_pid, p, __ATOMIC_RELAXED);
	}
	return p;
}

static pid_t my_tid(void)
{
	if (!cached_tid)
		cached_tid = (pid_t)syscall(SYS_gettid);
	return cached_tid;
}

/* ---- fd table --------------------------------------------------------------- */

static inline int kind_of(int fd)
{
	if (fd < 0 || fd >= IPR_MAX_FDS)
		return 0;
	return __atomic_load_n(&fd_kind[fd], __ATOMIC_RELAXED);
}

static void note(const char *fmt, ...);
static void say_once(const char *what, int err);

static void set_kind(int fd, int kind)
{
	if (fd < 0)
		return;
	if (fd >= IPR_MAX_FDS) {
		if (kind)
			note("fd %d is beyond the recorder's table of %d fds: not recorded",
			     fd, IPR_MAX_FDS);
		return;
	}
	__atomic_store_n(&fd_kind[fd], (unsigned char)kind, __ATOMIC_RELAXED);
}

/* ---- spool ------------------------------------------------------------------ */

static void say_once(const char *what, int err)
{
	char msg[512];
	int n;

	if (failed)
		return;
	failed = 1;
	fail_err = err;
	n = snprintf(msg, sizeof(msg),
		     "ibpath record: recorder failure in pid %d: %s: %s; the program continues, "
		     "no longer recorded\n", (int)getpid(), what, strerror(err));
	if (n > 0)
		syscall(SYS_write, 2, msg, (size_t)n < sizeof(msg) ? (size_t)n : sizeof(msg) - 1);
}

/*
 * Records lost to a recorder failure, counted per process in $IBPATHREC_LOST: LOST_SLOTS
 * slots of { u32 pid, i32 errno, u64 records } in a file ibpath record makes (zeroed, so
 * that no page of it needs the disk that may be full) and reads after the run
 * (record/spool.py LOST_SLOT).  Shared by fork (MAP_SHARED); an exec'd child maps it again.
 */
struct lost_slot {
	uint32_t pid;
	int32_t err;
	uint64_t records;
};

static struct lost_slot *lost_map;
static struct lost_slot *my_slot;	/* forgotten in a forked child (atfork_child) */

/* spool_lock held: n records of this process were not written (err). */
static void lost(unsigned int n, int err)
{
	uint32_t pid = (uint32_t)my_pid();
	int i;

	if (!my_slot) {
		if (!lost_map) {
			const char *name = getenv("IBPATHREC_LOST");
			void *m;
			int fd;

			if (!name || !*name)
				return;
			fd = (int)syscall(SYS_openat, AT_FDCWD, name, O_RDWR | O_CLOEXEC);
			if (fd < 0)
				return;
			m = mmap(NULL, IPR_LOST_SLOTS * sizeof(struct lost_slot),
				 PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			syscall(SYS_close, fd);	/* not close(): it may take the lock we hold */
			if (m == MAP_FAILED)
				return;
			lost_map = m;
		}
		for (i = 0; i < IPR_LOST_SLOTS && !my_slot; i++) {
			uint32_t free_pid = 0;

			if (__atomic_load_n(&lost_map[i].pid, __ATOMIC_ACQUIRE) == pid ||
			    __atomic_compare_exchange_n(&lost_map[i].pid, &free_pid, pid, 0,
							__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
				my_slot = &lost_map[i];
		}
		if (!my_slot)
			return;
		__atomic_store_n(&my_slot->err, err, __ATOMIC_RELAXED);
	}
	__atomic_add_fetch(&my_slot->records, n, __ATOMIC_RELAXED);
}

/* spool_lock held.  0: spool usable. */
static int spool_ready(void)
{
	const char *name;

	if (spool_fd >= 0)
		return 0;
	if (spool_fd == -1)
		return -1;
	name = getenv("IBPATHREC_SPOOL");
	if (!name || !*name) {
		spool_fd = -1;
		return -1;
	}
	spool_fd = (int)syscall(SYS_openat, AT_FDCWD, name,
				O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (spool_fd < 0) {
		say_once("cannot open the spool", errno);
		spool_fd = -1;
		return -1;
	}
	if (spool_fd < IPR_MAX_FDS)
		fd_kind[spool_fd] = 0;	/* the spool is never a recorded fd */
	return 0;
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Copy n bytes of this process's memory at src into dst without faulting. */
static size_t safe_copy(void *dst, const void *src, size_t n, uint16_t *flags)
{
	struct iovec local = { dst, n }, remote = { (void *)src, n };
	ssize_t r;

	if (!n)
		return 0;
	r = syscall(SYS_process_vm_readv, my_pid(), &local, 1UL, &remote, 1UL, 0UL);
	if (r == (ssize_t)n)
		return n;
	if (r < 0 && (errno == ENOSYS || errno == EPERM)) {
		/* no process_vm_readv here: callers only pass memory the kernel just read */
		memcpy(dst, src, n);
		return n;
	}
	*flags |= IPR_FLAG_UNREADABLE;
	return r > 0 ? (size_t)r : 0;
}

/*
 * A part of a record: bytes already copied out of the caller's memory.  What a call hands
 * in (a command, a MAD, a message) is copied before the call, since once the call returns
 * another thread may reuse the buffer (OpenSM's vendor layer does); what it gets back
 * after.
 */
struct part {
	const unsigned char *data;
	size_t len;		/* bytes copied */
	size_t orig;		/* bytes the call had */
	uint16_t flags;
};

static __thread unsigned char *tbuf;

/* Calls recorded at once on one thread: the program's, and one a signal handler makes while
 * the thread records the first (each level has its own two parts). */
#define IPR_LEVELS 2

/* The calling thread's copy buffer (IPR_LEVELS x two parts of max_record bytes), made on first
 * use: a handler's call takes the second level, and must not call malloc. */
static unsigned char *thread_buf(void)
{
	if (!tbuf) {
		tbuf = malloc(IPR_LEVELS * 2 * max_record + 1);
		if (!tbuf) {
			sigset_t old;

			lock_spool(&old);
			say_once("no memory for the copy buffer", ENOMEM);
			lost(1, ENOMEM);
			unlock_spool(&old);
			return NULL;
		}
		pthread_setspecific(tbuf_key, tbuf);
	}
	return tbuf;
}

static __thread int recording;	/* calls of this thread between claim_buf and release_buf */

/*
 * The thread's copy buffer for one call, or NULL.  A signal handler that calls a wrapper
 * while its thread is recording another call gets the next level of the buffer; past
 * IPR_LEVELS (a handler interrupted by another handler) the call goes through unrecorded,
 * and a note says so.
 */
static unsigned char *claim_buf(int fd, const char *call)
{
	unsigned char *tb;

	/* (a handler that comes while the first level's buffer is being allocated must not
	 * call malloc either) */
	if (recording >= IPR_LEVELS || (recording && !tbuf)) {
		note("%s on fd %d from a signal handler while this thread was recording %d other "
		     "call(s): not recorded", call, fd, recording);
		return NULL;
	}
	recording++;
	tb = thread_buf();
	if (!tb) {
		recording--;
		return NULL;
	}
	return tb + 2 * max_record * (size_t)(recording - 1);
}

static void release_buf(void)
{
	recording--;
}

/* Copy up to max_record of the len bytes at src (caller memory) into dst. */
static void capture(struct part *pt, unsigned char *dst, const void *src, size_t len)
{
	size_t n = len > max_record ? max_record : len;

	pt->flags = n < len ? IPR_FLAG_TRUNCATED : 0;
	pt->data = dst;
	pt->orig = len;
	pt->len = safe_copy(dst, src, n, &pt->flags);
}

/* The same, gathered from an iovec. */
static void capture_iov(struct part *pt, unsigned char *dst, const struct iovec *iov,
			size_t iovcnt, size_t len)
{
	size_t want = len > max_record ? max_record : len, i;

	pt->flags = want < len ? IPR_FLAG_TRUNCATED : 0;
	pt->data = dst;
	pt->orig = len;
	pt->len = 0;
	for (i = 0; i < iovcnt && pt->len < want; i++) {
		size_t take = iov[i].iov_len < want - pt->len ? iov[i].iov_len : want - pt->len;
		pt->len += safe_copy(dst + pt->len, iov[i].iov_base, take, &pt->flags);
	}
}

/* A stream socket took r of the bytes captured: the record holds what was sent. */
static void sent(struct part *pt, ssize_t r)
{
	if (r >= 0 && (size_t)r < pt->orig) {
		pt->orig = (size_t)r;
		if (pt->len > (size_t)r)
			pt->len = (size_t)r;
		if (pt->len == pt->orig)
			pt->flags &= (uint16_t)~IPR_FLAG_TRUNCATED;
	}
}

/* Fill one record at p; returns its size. */
static size_t put_record(unsigned char *p, int kind, int part, int fd, uint32_t aux,
			 int64_t ts, long long rc, int err, const struct part *pt)
{
	struct ipr_hdr h;

	memset(&h, 0, sizeof(h));
	memcpy(h.magic, IPR_MAGIC, 4);
	h.kind = (uint8_t)kind;
	h.part = (uint8_t)part;
	h.flags = pt->flags;
	h.pid = (uint32_t)my_pid();
	h.tid = (uint32_t)my_tid();
	h.fd = fd;
	h.aux = aux;
	h.ts_ns = ts;
	h.rc = rc;
	h.err = err;
	h.length = (uint32_t)pt->len;
	h.orig_length = (uint32_t)pt->orig;
	memcpy(p, &h, sizeof(h));
	memcpy(p + IPR_HDR_SIZE, pt->data, pt->len);
	return IPR_HDR_SIZE + pt->len;
}

/* spool_lock held: write the nrec records (size bytes) of buf, honouring the per-run cap. */
static void spool_write(size_t size, unsigned int nrec)
{
	struct stat st;
	size_t off = 0;

	if (max_total >= 0 && fstat(spool_fd, &st) == 0 &&
	    (long long)st.st_size + (long long)size > max_total) {
		if (!run_cap_noted) {
			static const char text[] = "per-run cap reached: records after this one "
						   "are dropped (IBPATHREC_MAX_TOTAL)";
			struct part pt = { (const unsigned char *)text, sizeof(text) - 1,
					   sizeof(text) - 1, 0 };

			run_cap_noted = 1;
			size = put_record(buf, IPR_KIND_NOTE, IPR_PART_CALL, -1, 0, now_ns(), 0, 0,
					  &pt);
			nrec = 1;
		} else {
			return;
		}
	}
	while (off < size) {
		long r = syscall(SYS_write, spool_fd, buf + off, size - off);
		if (r < 0) {
			int e = errno;
			struct stat now;

			if (e == EINTR)
				continue;
			/* a disk that filled up took part of the record: the spool keeps whole
			 * records only (nobody could append after it: the disk is full) */
			if (off && fstat(spool_fd, &now) == 0 && now.st_size >= (off_t)off)
				if (ftruncate(spool_fd, now.st_size - (off_t)off))
					e = errno;
			say_once("cannot write the spool", e);
			lost(nrec, e);
			spool_fd = -1;
			return;
		}
		off += (size_t)r;
	}
}

/* One record, or a call record followed by its extra part (b, extra_part >= 0). */
static void emit(int kind, int fd, uint32_t aux, int64_t ts, long long rc, int err,
		 int part, const struct part *a, int extra_part, const struct part *b,
		 int64_t extra_ts)
{
	int saved = errno;
	unsigned int nrec = extra_part >= 0 ? 2 : 1;
	sigset_t old;
	size_t size;

	lock_spool(&old);
	if (spool_ready() == 0) {
		size = put_record(buf, kind, part, fd, aux, ts, rc, err, a);
		if (extra_part >= 0)
			size += put_record(buf + size, kind, extra_part, fd, aux, extra_ts, rc, err, b);
		spool_write(size, nrec);
	} else if (failed) {
		lost(nrec, fail_err);
	}
	unlock_spool(&old);
	errno = saved;
}

static void note(const char *fmt, ...)
{
	char text[256];
	struct part pt;
	va_list ap;
	int n, saved = errno;

	va_start(ap, fmt);
	n = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(text))
		n = sizeof(text) - 1;
	pt.data = (const unsigned char *)text;
	pt.len = pt.orig = (size_t)n;
	pt.flags = 0;
	emit(IPR_KIND_NOTE, -1, 0, now_ns(), 0, 0, IPR_PART_CALL, &pt, -1, NULL, 0);
	errno = saved;
}

static sigset_t fork_mask;	/* the forking thread's signal mask, kept under the lock */

static void atfork_prepare(void)
{
	sigset_t old;

	lock_spool(&old);
	fork_mask = old;
}

static void atfork_parent(void)
{
	sigset_t old = fork_mask;

	unlock_spool(&old);
}

static void atfork_child(void)
{
	sigset_t old = fork_mask;

	cached_pid = 0;		/* the child is another process, its one thread another task */
	cached_tid = 0;
	my_slot = NULL;		/* and counts its lost records under its own pid */
	unlock_spool(&old);
}

static void inherited_fds(void);

__attribute__((constructor)) static void ibpathrec_init(void)
{
	ensure_init();
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	inherited_fds();
}

/* ---- ucma -------------------------------------------------------------------- */

/* The response pointer inside a command that has one the recorder keeps, or -1. */
static long response_offset(uint32_t cmd)
{
	switch (cmd) {
	case RDMA_USER_CM_CMD_CREATE_ID:
		return offsetof(struct rdma_ucm_create_id, response);
	case RDMA_USER_CM_CMD_QUERY:
		return offsetof(struct rdma_ucm_query, response);
	case RDMA_USER_CM_CMD_GET_EVENT:
		return offsetof(struct rdma_ucm_get_event, response);
	}
	return -1;
}

/* What the kernel writes back into the response buffer of out bytes (ucma.c). */
static size_t response_length(uint32_t cmd, const unsigned char *cmdbuf, size_t in,
			      const void *resp, size_t out)
{
	size_t n = out;
	uint16_t flags = 0;

	if (cmd == RDMA_USER_CM_CMD_CREATE_ID && n > sizeof(struct rdma_ucm_create_id_resp))
		n = sizeof(struct rdma_ucm_create_id_resp);
	if (cmd == RDMA_USER_CM_CMD_GET_EVENT && n > sizeof(struct rdma_ucm_event_resp))
		n = sizeof(struct rdma_ucm_event_resp);
	if (cmd == RDMA_USER_CM_CMD_QUERY && in >= sizeof(struct rdma_ucm_query)) {
		struct rdma_ucm_query q;
		struct rdma_ucm_query_path_resp r;

		memcpy(&q, cmdbuf, sizeof(q));
		if (q.option == RDMA_USER_CM_QUERY_PATH && out >= sizeof(r) &&
		    safe_copy(&r, resp, sizeof(r), &flags) == sizeof(r)) {
			size_t want = sizeof(r) + (size_t)r.num_paths * sizeof(struct ib_path_rec_data);
			if (want < n)
				n = want;
		}
	}
	return n;
}

/* A write() to rdma_cm: the command (and a SET_OPTION's path array) copied before the
 * call, the response the kernel wrote back after it. */
static ssize_t ucma_write(int fd, const void *data, size_t count, unsigned char *tb,
			  int64_t ts)
{
	struct rdma_ucm_cmd_hdr hdr = { 0 };
	union {
		struct rdma_ucm_create_id create_id;
		struct rdma_ucm_query query;
		struct rdma_ucm_get_event get_event;
		struct rdma_ucm_set_option set_option;
	} cmd;
	unsigned char *cmdbuf = (unsigned char *)&cmd;
	struct part a, b = { 0 };
	const void *resp = NULL;
	int extra = -1, have_hdr = 1, e;
	uint16_t flags = 0;
	size_t in = 0;
	long off;
	ssize_t r;

	capture(&a, tb, data, count);
	/* the command is parsed from the copy; from the caller's memory when a cap cut it */
	if (a.len >= sizeof(hdr))
		memcpy(&hdr, a.data, sizeof(hdr));
	else if (count < sizeof(hdr) || safe_copy(&hdr, data, sizeof(hdr), &flags) != sizeof(hdr))
		have_hdr = 0;
	if (have_hdr) {
		in = count - sizeof(hdr) < hdr.in ? count - sizeof(hdr) : hdr.in;
		if (in > sizeof(cmd))
			in = sizeof(cmd);
		if (sizeof(hdr) + in <= a.len)
			memcpy(cmdbuf, a.data + sizeof(hdr), in);
		else if (safe_copy(cmdbuf, (const unsigned char *)data + sizeof(hdr), in,
				   &flags) != in)
			in = 0;
	}
	off = response_offset(hdr.cmd);
	if (hdr.cmd == RDMA_USER_CM_CMD_SET_OPTION && in >= sizeof(cmd.set_option) &&
	    cmd.set_option.level == RDMA_OPTION_IB &&
	    cmd.set_option.optname == RDMA_OPTION_IB_PATH) {
		capture(&b, tb + max_record, (const void *)(uintptr_t)cmd.set_option.optval,
			cmd.set_option.optlen);
		extra = IPR_PART_OPTVAL;
	} else if (off >= 0 && hdr.out && in >= (size_t)off + sizeof(uint64_t)) {
		uint64_t ptr;

		memcpy(&ptr, cmdbuf + off, sizeof(ptr));
		resp = (const void *)(uintptr_t)ptr;
		extra = IPR_PART_RESPONSE;
	}
	r = real_write(fd, data, count);
	e = errno;
	if (extra == IPR_PART_RESPONSE) {
		if (r >= 0)
			capture(&b, tb + max_record, resp,
				response_length(hdr.cmd, cmdbuf, in, resp, hdr.out));
		else
			extra = -1;	/* the kernel wrote nothing back */
	}
	emit(IPR_KIND_UCMA, fd, hdr.cmd, ts, r, r < 0 ? e : 0, IPR_PART_CALL, &a, extra, &b,
	     extra == IPR_PART_RESPONSE ? now_ns() : ts);
	errno = e;
	return r;
}

/* ---- path matching ------------------------------------------------------------ */

static int kind_for_path(const char *path)
{
	if (!path)
		return 0;
	if (!strcmp(path, RDMA_CM_PATH))
		return IPR_KIND_UCMA;
	if (!strncmp(path, UMAD_PREFIX, sizeof(UMAD_PREFIX) - 1))
		return IPR_KIND_UMAD;
	return 0;
}

static int is_acm_address(const struct sockaddr *sa, socklen_t len)
{
	const char *list, *p;
	long port = DEFAULT_ACM_PORT;

	if (!sa || len < (socklen_t)sizeof(sa_family_t))
		return 0;
	if (sa->sa_family == AF_UNIX) {
		const struct sockaddr_un *un = (const struct sockaddr_un *)sa;
		size_t plen;

		if (len <= offsetof(struct sockaddr_un, sun_path) || !un->sun_path[0])
			return 0;
		plen = strnlen(un->sun_path, len - offsetof(struct sockaddr_un, sun_path));
		list = getenv("IBPATHREC_ACM_SOCKETS");
		if (!list)
			list = DEFAULT_ACM_SOCKETS;
		for (p = list; *p;) {
			const char *end = strchr(p, ':');
			size_t n = end ? (size_t)(end - p) : strlen(p);
			if (n == plen && !memcmp(p, un->sun_path, n))
				return 1;
			if (!end)
				break;
			p = end + 1;
		}
		return 0;
	}
	list = getenv("IBPATHREC_ACM_PORT");
	if (list && *list)
		port = strtol(list, NULL, 0);
	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in))
		return ntohs(((const struct sockaddr_in *)sa)->sin_port) == port;
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6))
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port) == port;
	return 0;
}

/*
 * The fds an exec'd program inherits: what they are is read back from the kernel, since
 * the table of the program before exec is gone (an ACM socket by its peer's address, or its
 * own for a listener and the connections it accepted).
 */
static int socket_kind(int fd)
{
	union {
		struct sockaddr sa;
		struct sockaddr_storage ss;
	} a;
	socklen_t len = sizeof(a);
	int domain = 0, protocol = 0, listening = 0;
	socklen_t olen = sizeof(int);

	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &olen))
		return 0;
	if (domain == AF_NETLINK) {
		olen = sizeof(int);
		if (!getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &olen) &&
		    protocol == NETLINK_RDMA)
			return IPR_KIND_NETLINK;
		return 0;
	}
	if (!getpeername(fd, &a.sa, &len) && is_acm_address(&a.sa, len))
		return IPR_KIND_ACM;
	len = sizeof(a);
	if (getsockname(fd, &a.sa, &len) || !is_acm_address(&a.sa, len))
		return 0;
	olen = sizeof(int);
	if (!getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &olen) && listening)
		return KIND_ACM_LISTEN;
	return IPR_KIND_ACM;
}

static void inherited_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char link[64], target[256];
		ssize_t n;
		int fd;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		fd = atoi(e->d_name);
		if (fd == dirfd(d) || fd >= IPR_MAX_FDS)
			continue;
		snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
		n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		if (!strncmp(target, "socket:", 7))
			set_kind(fd, socket_kind(fd));
		else
			set_kind(fd, kind_for_path(target));
	}
	closedir(d);
}

/* ---- open / close / dup ------------------------------------------------------- */

static mode_t mode_arg(int flags, va_list ap)
{
	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
		return (mode_t)va_arg(ap, int);
	return 0;
}

static int opened(const char *path, int fd)
{
	int kind = kind_for_path(path);

	if (fd >= 0)
		set_kind(fd, kind);	/* 0 clears a number closed behind our back */
	return fd;
}

#define OPEN_WRAPPER(name, real)						\
int name(const char *path, int flags, ...)					\
{										\
	va_list ap;								\
	mode_t mode;								\
	int fd, saved;								\
										\
	ensure_init();								\
	va_start(ap, flags);							\
	mode = mode_arg(flags, ap);						\
	va_end(ap);								\
	fd = real(path, flags, mode);						\
	saved = errno;								\
	opened(path, fd);							\
	errno = saved;								\
	return fd;								\
}

#define OPENAT_WRAPPER(name, real)						\
int name(int dirfd, const char *path, int flags, ...)				\
{										\
	va_list ap;								\
	mode_t mode;								\
	int fd, saved;								\
										\
	ensure_init();								\
	va_start(ap, flags);							\
	mode = mode_arg(flags, ap);						\
	va_end(ap);								\
	fd = real(dirfd, path, flags, mode);					\
	saved = errno;								\
	opened(path, fd);							\
	errno = saved;								\
	return fd;								\
}

OPEN_WRAPPER(open, real_open)
OPEN_WRAPPER(open64, real_open64)
OPENAT_WRAPPER(openat, real_openat)
OPENAT_WRAPPER(openat64, real_openat64)

/* _FORTIFY_SOURCE's checked variants (no mode argument) */
#define OPEN2_WRAPPER(name, real, params, args)					\
int name params									\
{										\
	int fd, saved;								\
										\
	ensure_init();								\
	fd = real args;								\
	saved = errno;								\
	opened(path, fd);							\
	errno = saved;								\
	return fd;								\
}

OPEN2_WRAPPER(__open_2, real_open_2, (const char *path, int flags), (path, flags))
OPEN2_WRAPPER(__open64_2, real_open64_2, (const char *path, int flags), (path, flags))
OPEN2_WRAPPER(__openat_2, real_openat_2, (int dirfd, const char *path, int flags),
	      (dirfd, path, flags))
OPEN2_WRAPPER(__openat64_2, real_openat64_2, (int dirfd, const char *path, int flags),
	      (dirfd, path, flags))

/* The program closes (or dup2s over) the spool's fd: reopen it on the next record. */
static void spool_fd_lost(int fd)
{
	sigset_t old;

	if (fd != __atomic_load_n(&spool_fd, __ATOMIC_RELAXED))
		return;	/* every close() comes here: no lock unless it is the spool's */
	lock_spool(&old);
	if (spool_fd >= 0 && fd == spool_fd)
		spool_fd = -2;
	unlock_spool(&old);
}

int close(int fd)
{
	ensure_init();
	/* untrack first: once closed, another thread may get the same number */
	if (kind_of(fd))
		set_kind(fd, 0);
	spool_fd_lost(fd);
	return real_close(fd);
}

int close_range(unsigned int first, unsigned int last, int flags)
{
	unsigned int fd;
	int r, saved;

	ensure_init();
	if (!real_close_range) {
		errno = ENOSYS;
		return -1;
	}
	r = real_close_range(first, last, flags);
	saved = errno;
	if (r == 0 && !(flags & CLOSE_RANGE_CLOEXEC)) {
		for (fd = first; fd <= last && fd < IPR_MAX_FDS; fd++)
			if (fd_kind[fd])
				set_kind((int)fd, 0);
		sigset_t old;

		lock_spool(&old);
		if (spool_fd >= 0 && (unsigned int)spool_fd >= first &&
		    (unsigned int)spool_fd <= last)
			spool_fd = -2;
		unlock_spool(&old);
	}
	errno = saved;
	return r;
}

static int duplicated(int oldfd, int newfd)
{
	if (newfd >= 0 && newfd != oldfd)
		set_kind(newfd, kind_of(oldfd));
	return newfd;
}

int dup(int oldfd)
{
	int r, saved;

	ensure_init();
	r = real_dup(oldfd);
	saved = errno;
	duplicated(oldfd, r);
	errno = saved;
	return r;
}

int dup2(int oldfd, int newfd)
{
	int r, saved;

	ensure_init();
	if (newfd != oldfd)
		spool_fd_lost(newfd);
	r = real_dup2(oldfd, newfd);
	saved = errno;
	duplicated(oldfd, r);
	errno = saved;
	return r;
}

int dup3(int oldfd, int newfd, int flags)
{
	int r, saved;

	ensure_init();
	if (newfd != oldfd)
		spool_fd_lost(newfd);
	r = real_dup3(oldfd, newfd, flags);
	saved = errno;
	duplicated(oldfd, r);
	errno = saved;
	return r;
}

/* glibc's own fcntl reads the optional argument as a void * (io/fcntl64.c): so do we. */
static int fcntl_common(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
	int r, saved;

	r = real(fd, cmd, arg);
	saved = errno;
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
		duplicated(fd, r);
	errno = saved;
	return r;
}

/* fcntl's third argument is an int or a pointer: passed on as the word it was given */
#define FCNTL_WRAPPER(name, real)						\
int name(int fd, int cmd, ...)							\
{										\
	va_list ap;								\
	void *arg;								\
										\
	ensure_init();								\
	va_start(ap, cmd);							\
	arg = va_arg(ap, void *);						\
	va_end(ap);								\
	return fcntl_common(real, fd, cmd, arg);				\
}

FCNTL_WRAPPER(fcntl, real_fcntl)
FCNTL_WRAPPER(fcntl64, real_fcntl64 ? real_fcntl64 : real_fcntl)

/* ---- sockets ------------------------------------------------------------------ */

int socket(int domain, int type, int protocol)
{
	int fd, saved;

	ensure_init();
	fd = real_socket(domain, type, protocol);
	saved = errno;
	if (fd >= 0)
		set_kind(fd, domain == AF_NETLINK && protocol == NETLINK_RDMA ? IPR_KIND_NETLINK : 0);
	errno = saved;
	return fd;
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	int r, saved;

	ensure_init();
	r = real_connect(fd, addr, len);
	saved = errno;
	if ((r == 0 || saved == EINPROGRESS) && kind_of(fd) != IPR_KIND_NETLINK &&
	    is_acm_address(addr, len))
		set_kind(fd, IPR_KIND_ACM);
	errno = saved;
	return r;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	int r, saved;

	ensure_init();
	r = real_bind(fd, addr, len);
	saved = errno;
	if (r == 0 && kind_of(fd) != IPR_KIND_NETLINK && is_acm_address(addr, len))
		set_kind(fd, KIND_ACM_LISTEN);
	errno = saved;
	return r;
}

static int accepted(int lfd, int fd)
{
	if (fd >= 0)
		set_kind(fd, kind_of(lfd) == KIND_ACM_LISTEN ? IPR_KIND_ACM : 0);
	return fd;
}

int accept(int fd, struct sockaddr *addr, socklen_t *len)
{
	int r, saved;

	ensure_init();
	r = real_accept(fd, addr, len);
	saved = errno;
	accepted(fd, r);
	errno = saved;
	return r;
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	int r, saved;

	ensure_init();
	r = real_accept4(fd, addr, len, flags);
	saved = errno;
	accepted(fd, r);
	errno = saved;
	return r;
}

/* a data-carrying kind (ACM_LISTEN carries none) */
static inline int data_kind(int fd)
{
	int k = kind_of(fd);
	return k == KIND_ACM_LISTEN ? 0 : k;
}

static uint32_t nl_dest(const struct sockaddr *sa, socklen_t len)
{
	if (sa && len >= (socklen_t)sizeof(struct sockaddr_nl) && sa->sa_family == AF_NETLINK)
		return ((const struct sockaddr_nl *)sa)->nl_pid;
	return 0;
}

static size_t iov_length(const struct iovec *iov, size_t iovcnt)
{
	size_t n = 0, i;

	for (i = 0; i < iovcnt; i++)
		n += iov[i].iov_len;
	return n;
}

/* ---- data calls ----------------------------------------------------------------- */
/*
 * Each wrapper keeps the real call's errno (e), records, then restores e: what the program
 * sees is exactly what libc returned.  Reads that bring nothing (EAGAIN, EINTR, end of
 * file) and MSG_PEEK reads (the same bytes come again) are not recorded.
 */

static int nothing_read(ssize_t r, int e)
{
	return r == 0 || (r < 0 && (e == EAGAIN || e == EWOULDBLOCK || e == EINTR));
}

/* a device takes a write whole; a socket may take part of it */
static int is_socket_kind(int kind)
{
	return kind == IPR_KIND_ACM || kind == IPR_KIND_NETLINK;
}

/* What arrived: r bytes of a buffer of room bytes (MSG_TRUNC: r may exceed room). */
static void record_read(int kind, int fd, ssize_t r, int e, const void *data, size_t room)
{
	unsigned char *tb = claim_buf(fd, "read");
	struct part a;

	if (!tb)
		return;
	capture(&a, tb, data, r > 0 ? ((size_t)r < room ? (size_t)r : room) : 0);
	emit(kind, fd, 0, now_ns(), r, r < 0 ? e : 0, IPR_PART_READ, &a, -1, NULL, 0);
	release_buf();
}

static void record_read_iov(int kind, int fd, ssize_t r, int e, const struct iovec *iov,
			    size_t iovcnt)
{
	unsigned char *tb = claim_buf(fd, "read");
	size_t room = iov_length(iov, iovcnt);
	struct part a;

	if (!tb)
		return;
	capture_iov(&a, tb, iov, iovcnt, r > 0 ? ((size_t)r < room ? (size_t)r : room) : 0);
	emit(kind, fd, 0, now_ns(), r, r < 0 ? e : 0, IPR_PART_READ, &a, -1, NULL, 0);
	release_buf();
}

ssize_t write(int fd, const void *data, size_t count)
{
	unsigned char *tb;
	struct part a;
	int kind, e;
	int64_t ts;
	ssize_t r;

	ensure_init();
	kind = data_kind(fd);
	if (__builtin_expect(!kind, 1) || !(tb = claim_buf(fd, "write")))
		return real_write(fd, data, count);
	ts = now_ns();
	if (kind == IPR_KIND_UCMA) {
		r = ucma_write(fd, data, count, tb, ts);
		release_buf();
		return r;
	}
	capture(&a, tb, data, count);
	r = real_write(fd, data, count);
	e = errno;
	if (is_socket_kind(kind))
		sent(&a, r);
	emit(kind, fd, 0, ts, r, r < 0 ? e : 0, IPR_PART_CALL, &a, -1, NULL, 0);
	release_buf();
	errno = e;
	return r;
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt)
{
	unsigned char *tb;
	struct part a;
	int kind, e;
	int64_t ts;
	ssize_t r;

	ensure_init();
	kind = data_kind(fd);
	if (__builtin_expect(!kind, 1) || iovcnt <= 0 || !(tb = claim_buf(fd, "writev")))
		return real_writev(fd, iov, iovcnt);
	ts = now_ns();
	capture_iov(&a, tb, iov, (size_t)iovcnt, iov_length(iov, (size_t)iovcnt));
	r = real_writev(fd, iov, iovcnt);
	e = errno;
	if (is_socket_kind(kind))
		sent(&a, r);
	emit(kind, fd, 0, ts, r, r < 0 ? e : 0, IPR_PART_CALL, &a, -1, NULL, 0);
	release_buf();
	errno = e;
	return r;
}

ssize_t read(int fd, void *data, size_t count)
{
	int kind, e;
	ssize_t r;

	ensure_init();
	kind = data_kind(fd);
	/* librdmacm never reads the rdma_cm fd: events come back through GET_EVENT */
	if (__builtin_expect(!kind || kind == IPR_KIND_UCMA, 1))
		return real_read(fd, data, count);
	r = real_read(fd, data, count);
	e = errno;
	if (!nothing_read(r, e))
		record_read(kind, fd, r, e, data, count);
	errno = e;
	return r;
}

/* send() and sendto(): each calls its own libc function (another preload may hook one). */
static ssize_t send_common(int kind, int fd, const void *data, size_t len, int flags,
			   const struct sockaddr *to, socklen_t tolen, int is_sendto)
{
	unsigned char *tb = claim_buf(fd, is_sendto ? "sendto" : "send");
	struct part a;
	int64_t ts = now_ns();
	ssize_t r;
	int e;

	if (tb)
		capture(&a, tb, data, len);
	r = is_sendto ? real_sendto(fd, data, len, flags, to, tolen)
		      : real_send(fd, data, len, flags);
	e = errno;
	if (tb) {
		sent(&a, r);
		emit(kind, fd, nl_dest(to, tolen), ts, r, r < 0 ? e : 0, IPR_PART_CALL, &a, -1,
		     NULL, 0);
		release_buf();
	}
	errno = e;
	return r;
}

ssize_t send(int fd, const void *data, size_t len, int flags)
{
	int kind;

	ensure_init();
	kind = data_kind(fd);
	if (!kind)
		return real_send(fd, data, len, flags);
	return send_common(kind, fd, data, len, flags, NULL, 0, 0);
}

ssize_t sendto(int fd, const void *data, size_t len, int flags, const struct sockaddr *to,
	       socklen_t tolen)
{
	int kind;

	ensure_init();
	kind = data_kind(fd);
	if (!kind)
		return real_sendto(fd, data, len, flags, to, tolen);
	return send_common(kind, fd, data, len, flags, to, tolen, 1);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	unsigned char *tb;
	struct part a;
	int kind, e;
	int64_t ts;
	ssize_t r;

	ensure_init();
	kind = data_kind(fd);
	if (!kind || !(tb = claim_buf(fd, "sendmsg")))
		return real_sendmsg(fd, msg, flags);
	ts = now_ns();
	capture_iov(&a, tb, msg->msg_iov, msg->msg_iovlen,
		    iov_length(msg->msg_iov, msg->msg_iovlen));
	r = real_sendmsg(fd, msg, flags);
	e = errno;
	sent(&a, r);
	emit(kind, fd, nl_dest((const struct sockaddr *)msg->msg_name, msg->msg_namelen), ts, r,
	     r < 0 ? e : 0, IPR_PART_CALL, &a, -1, NULL, 0);
	release_buf();
	errno = e;
	return r;
}

ssize_t recv(int fd, void *data, size_t len, int flags)
{
	int kind, e;
	ssize_t r;

	ensure_init();
	kind = data_kind(fd);
	if (!kind || (flags & MSG_PEEK))
		return real_recv(fd, data, len, flags);
	r = real_recv(fd, data, len, flags);
	e = errno;
	if (!nothing_read(r, e))
		record_read(kind, fd, r, e, data, len);
	errno = e;
	return r;
}

ssize_t recvfrom(int fd, void *data, size_t len, int flags, struct sockaddr *from,
		 socklen_t *fromlen)
{
	int kind, e;
	ssize_t r;

	ensure_init();
	kind = data_kind(fd);
	if (!kind || (flags & MSG_PEEK))
		return real_recvfrom(fd, data, len, flags, from, fromlen);
	r = real_recvfrom(fd, data, len, flags, from, fromlen);
	e = errno;
	if (!nothing_read(r, e))
		record_read(kind, fd, r, e, data, len);
	errno = e;
	return r;
}

ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	int kind, e;
	ssize_t r;

	ensure_init();
	kind = data_kind(fd);
	if (!kind || (flags & MSG_PEEK))
		return real_recvmsg(fd, msg, flags);
	r = real_recvmsg(fd, msg, flags);
	e = errno;
	if (!nothing_read(r, e))
		record_read_iov(kind, fd, r, e, msg->msg_iov, msg->msg_iovlen);
	errno = e;
	return r;
}

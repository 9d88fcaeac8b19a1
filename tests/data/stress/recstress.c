/*
 * recstress.c - a program that checks its own calls' results, for tests/test_record_stress.py.
 *
 * It runs under `ibpath record` and without it; every line it prints is a result it checked
 * (return values, errno, bytes moved, signals delivered) and must be the same in both runs.
 * Nothing it prints depends on timing or on the recorder: counts of what went as expected,
 * never raw timings or fd numbers.
 *
 * Tracked fds are ACM sockets (the recorder tracks AF_UNIX sockets connected to, or
 * accepted from listeners bound at, the paths of $IBPATHREC_ACM_SOCKETS):
 *   TRACKED  a listener bound here is tracked, so both ends of its connections are;
 *   LINK     a symlink to UNTRACKED, where a listener the recorder does not track is bound:
 *            a client connecting to LINK is tracked, the accepted end is not.
 * Every message is a 64-byte struct acm_hdr (rdma-core librdmacm/acm.h: version, opcode,
 * status, data[3], u16 length, u64 tid) with length 64, the tid naming its sender, and 48
 * bytes of a pattern.
 *
 * Usage:
 *   recstress all DIR          every scenario but the disk-full one, one line each
 *   recstress diskfull DIR N   N messages from the program and N from a forked child
 *   recstress execchild FD N   (exec'd by the fork_exec scenario) N messages on FD
 * DIR holds tracked.sock, link.sock -> untracked.sock and the scenario's scratch files.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG 64
#define WORKERS 8
#define PER_WORKER 1000

static const char *dir;

static void say(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (write(1, line, (size_t)n) != n)
		_exit(90);
}

static void die(const char *what)
{
	say("FATAL %s: %s\n", what, strerror(errno));
	_exit(99);
}

static void path_in(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", dir, name);
}

static void message(unsigned char *m, uint64_t tid)
{
	uint16_t len = MSG;
	int i;

	memset(m, 0, MSG);
	m[0] = 1;		/* version */
	m[1] = 1;		/* ACM_OP_RESOLVE */
	memcpy(m + 6, &len, 2);
	memcpy(m + 8, &tid, 8);
	for (i = 16; i < MSG; i++)
		m[i] = (unsigned char)(tid * 31 + (uint64_t)i);
}

static int listener(const char *name)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	path_in(a.sun_path, sizeof(a.sun_path), name);
	unlink(a.sun_path);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) || listen(fd, 64))
		die("bind/listen");
	return fd;
}

static int client(const char *name)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	if (fd < 0)
		die("socket");
	path_in(a.sun_path, sizeof(a.sun_path), name);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)))
		die("connect");
	return fd;
}

/* Write all of m (a signal may cut a blocking stream write short); 1 if every call went as
 * POSIX says: a positive count up to what was asked, or -1 with EINTR. */
static int write_all(int fd, const unsigned char *m, size_t len, int use_send)
{
	size_t off = 0;
	int good = 1;

	while (off < len) {
		ssize_t r = use_send ? send(fd, m + off, len - off, 0) : write(fd, m + off, len - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || (size_t)r > len - off)
			return 0;
		off += (size_t)r;
	}
	return good;
}

/* ---- a drain: reads a socket to its end, counting bytes and summing them ---------- */
struct drain {
	int fd;
	pthread_t th;
	unsigned long long bytes, sum;
	int bad;		/* a read failed other than with EINTR */
	volatile int *start;	/* wait for *start before reading (NULL: at once) */
	unsigned long long stop_after;	/* 0: to the end */
};

/* SIGALRM is for the main thread only: the scenarios know which call it interrupts */
static void main_thread_signals_only(void)
{
	sigset_t s;

	sigemptyset(&s);
	sigaddset(&s, SIGALRM);
	pthread_sigmask(SIG_BLOCK, &s, NULL);
}

static void *drain_main(void *p)
{
	struct drain *d = p;
	unsigned char b[4096];

	main_thread_signals_only();

	while (d->start && !__atomic_load_n(d->start, __ATOMIC_ACQUIRE))
		usleep(1000);
	for (;;) {
		ssize_t r, i;

		if (d->stop_after && d->bytes >= d->stop_after)
			break;
		r = read(d->fd, b, sizeof(b));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			d->bad = 1;
		if (r <= 0)
			break;
		for (i = 0; i < r; i++)
			d->sum += b[i];
		d->bytes += (unsigned long long)r;
	}
	return NULL;
}

static void drain_start(struct drain *d, int fd, volatile int *start, unsigned long long stop)
{
	memset(d, 0, sizeof(*d));
	d->fd = fd;
	d->start = start;
	d->stop_after = stop;
	if (pthread_create(&d->th, NULL, drain_main, d))
		die("pthread_create");
}

static void drain_join(struct drain *d)
{
	pthread_join(d->th, NULL);
}

static unsigned long long msg_sum(uint64_t tid)
{
	unsigned char m[MSG];
	unsigned long long s = 0;
	int i;

	message(m, tid);
	for (i = 0; i < MSG; i++)
		s += m[i];
	return s;
}

/* ---- scenario: threads ------------------------------------------------------------ */
struct worker {
	int id, tracked, devnull, pipe_w, pipe_r;
	pthread_t th;
	int tracked_ok, untracked_ok;
};

static void *worker_main(void *p)
{
	struct worker *w = p;
	unsigned char m[MSG], back[MSG];
	int i;

	main_thread_signals_only();

	for (i = 0; i < PER_WORKER; i++) {
		uint64_t tid = ((uint64_t)(w->id + 1) << 32) | (uint64_t)i;
		struct iovec iov[2];

		message(m, tid);
		if (i % 3 == 2) {	/* writev, split where a header ends */
			iov[0].iov_base = m;
			iov[0].iov_len = 16;
			iov[1].iov_base = m + 16;
			iov[1].iov_len = MSG - 16;
			w->tracked_ok += writev(w->tracked, iov, 2) == MSG;
		} else {
			w->tracked_ok += write_all(w->tracked, m, MSG, i % 3);
		}
		if (write(w->devnull, m, MSG) == MSG && write(w->pipe_w, m, MSG) == MSG &&
		    read(w->pipe_r, back, MSG) == MSG && !memcmp(back, m, MSG))
			w->untracked_ok++;
	}
	close(w->tracked);
	return NULL;
}

static void scenario_threads(void)
{
	struct worker w[WORKERS];
	struct drain d[WORKERS];
	unsigned long long bytes = 0, sum = 0, want_sum = 0;
	int lfd = listener("tracked.sock"), i, tok = 0, uok = 0, bad = 0, p[2];

	for (i = 0; i < WORKERS; i++) {
		memset(&w[i], 0, sizeof(w[i]));
		w[i].id = i;
		w[i].tracked = client("tracked.sock");
		drain_start(&d[i], accept(lfd, NULL, NULL), NULL, 0);
		w[i].devnull = open("/dev/null", O_WRONLY);
		if (w[i].devnull < 0 || pipe(p))
			die("open/pipe");
		w[i].pipe_r = p[0];
		w[i].pipe_w = p[1];
	}
	for (i = 0; i < WORKERS; i++)
		if (pthread_create(&w[i].th, NULL, worker_main, &w[i]))
			die("pthread_create");
	for (i = 0; i < WORKERS; i++) {
		int j;

		pthread_join(w[i].th, NULL);
		drain_join(&d[i]);
		tok += w[i].tracked_ok;
		uok += w[i].untracked_ok;
		bytes += d[i].bytes;
		sum += d[i].sum;
		bad += d[i].bad;
		for (j = 0; j < PER_WORKER; j++)
			want_sum += msg_sum(((uint64_t)(i + 1) << 32) | (uint64_t)j);
		close(d[i].fd);
		close(w[i].devnull);
		close(w[i].pipe_r);
		close(w[i].pipe_w);
	}
	close(lfd);
	say("threads: tracked_ok=%d untracked_ok=%d received=%llu sum_ok=%d read_errors=%d\n",
	    tok, uok, bytes, sum == want_sum, bad);
}

/* ---- the untracked peer: a listener at untracked.sock, reached through link.sock ----- */
static int ulfd = -1;

static void untracked_listener(void)
{
	char target[300], link[300];

	ulfd = listener("untracked.sock");
	path_in(target, sizeof(target), "untracked.sock");
	path_in(link, sizeof(link), "link.sock");
	unlink(link);
	if (symlink(target, link))
		die("symlink");
}

/* A tracked client whose peer the recorder does not see, and that peer. */
static int linked_pair(int *peer)
{
	int fd = client("link.sock");

	*peer = accept(ulfd, NULL, NULL);
	if (*peer < 0)
		die("accept");
	return fd;
}

/* ---- scenario: fork and exec in the middle of recording ----------------------------- */
static volatile int busy_stop;

static void *busy_main(void *p)
{
	int fd = *(int *)p;
	unsigned char m[MSG];
	uint64_t n = 0;

	main_thread_signals_only();

	while (!__atomic_load_n(&busy_stop, __ATOMIC_ACQUIRE)) {
		message(m, (7ULL << 40) | n++);
		if (!write_all(fd, m, MSG, 0)) {
			say("FATAL busy writer\n");
			_exit(98);
		}
	}
	return NULL;
}

static int send_n(int fd, uint64_t base, int n)
{
	unsigned char m[MSG];
	int i, ok = 0;

	for (i = 0; i < n; i++) {
		message(m, base | (uint64_t)i);
		ok += write_all(fd, m, MSG, i & 1);
	}
	return ok;
}

static void scenario_fork_exec(const char *self)
{
	int lfd = listener("tracked.sock"), busy_fd, fd, peer, ok, status = -1, k;
	struct drain bd, pd;
	pthread_t busy;
	pid_t pid;
	unsigned long long want = 0;

	busy_fd = client("tracked.sock");
	drain_start(&bd, accept(lfd, NULL, NULL), NULL, 0);
	/* tracked on both ends: the exec'd child finds what it is from its peer's address */
	fd = client("tracked.sock");
	peer = accept(lfd, NULL, NULL);
	drain_start(&pd, peer, NULL, 0);
	if (pthread_create(&busy, NULL, busy_main, &busy_fd))
		die("pthread_create");
	usleep(20000);		/* the busy writer is recording when fork() comes */
	pid = fork();
	if (pid < 0)
		die("fork");
	if (!pid) {
		char fdtext[16];

		/* the child: the busy thread is gone, the fds are shared */
		ok = send_n(fd, 2ULL << 40, 100);
		if (ok != 100)
			_exit(3);
		snprintf(fdtext, sizeof(fdtext), "%d", fd);
		execl(self, self, "execchild", fdtext, "100", (char *)NULL);
		_exit(4);
	}
	ok = send_n(fd, 1ULL << 40, 100);
	if (waitpid(pid, &status, 0) != pid)
		die("waitpid");
	__atomic_store_n(&busy_stop, 1, __ATOMIC_RELEASE);
	pthread_join(busy, NULL);
	close(busy_fd);
	close(fd);
	drain_join(&bd);
	drain_join(&pd);
	for (k = 0; k < 100; k++)
		want += msg_sum((1ULL << 40) | (uint64_t)k) + msg_sum((2ULL << 40) | (uint64_t)k) +
			msg_sum((3ULL << 40) | (uint64_t)k);
	say("fork_exec: parent_ok=%d child_exit=%d peer_bytes=%llu peer_sum_ok=%d "
	    "busy_bytes_whole=%d\n", ok, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
	    pd.bytes, pd.sum == want, bd.bytes % MSG == 0 && bd.bytes > 0);
	close(bd.fd);
	close(pd.fd);
	close(lfd);
}

static int exec_child(int fd, int n)
{
	int ok = send_n(fd, 3ULL << 40, n);

	say("execchild: ok=%d\n", ok);
	return ok == n ? 0 : 5;
}

/* ---- scenarios: a signal interrupts a blocked recorded write ------------------------ */
static volatile sig_atomic_t signals;

static void on_alarm(int sig)
{
	(void)sig;
	signals++;
}

static void arm(long usec, long interval)
{
	struct itimerval t = { { 0, interval }, { 0, usec } };

	setitimer(ITIMER_REAL, &t, NULL);
}

static void catch_alarm(void (*h)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = h;
	sa.sa_flags = flags;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
}

/* Send until the socket's buffer is full; the bytes sent. */
static unsigned long long fill(int fd)
{
	unsigned char m[MSG];
	unsigned long long n = 0;
	int fl = fcntl(fd, F_GETFL);

	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	message(m, 9ULL << 40);
	for (;;) {
		ssize_t r = send(fd, m, MSG, 0);
		if (r < 0) {
			if (errno != EAGAIN)
				die("fill");
			break;
		}
		n += (unsigned long long)r;
	}
	fcntl(fd, F_SETFL, fl);
	return n;
}

static void scenario_eintr(void)
{
	int peer, fd = linked_pair(&peer), e;
	unsigned char m[MSG];
	unsigned long long filled = fill(fd);
	struct drain d;
	ssize_t r;

	message(m, 10ULL << 40);
	signals = 0;
	catch_alarm(on_alarm, 0);
	arm(100000, 0);
	r = write(fd, m, MSG);	/* blocks: the buffer is full; SIGALRM without SA_RESTART */
	e = errno;
	say("eintr: rc=%zd errno=%s signals=%d filled_whole=%d\n", r,
	    r < 0 && e == EINTR ? "EINTR" : strerror(e), (int)signals, filled % MSG == 0);
	close(fd);
	drain_start(&d, peer, NULL, 0);
	drain_join(&d);
	close(peer);
}

static void scenario_restart(void)
{
	int peer, fd = linked_pair(&peer);
	unsigned char m[MSG];
	unsigned long long filled = fill(fd);
	struct drain d;
	ssize_t r;

	message(m, 11ULL << 40);
	signals = 0;
	catch_alarm(on_alarm, SA_RESTART);
	/* the peer starts reading once the signal came: the write restarts, then completes */
	drain_start(&d, peer, (volatile int *)&signals, filled + MSG);
	arm(100000, 0);
	r = write(fd, m, MSG);
	say("restart: rc=%zd signals=%d\n", r, (int)signals);
	drain_join(&d);
	say("restart: peer_bytes_ok=%d\n", d.bytes == filled + MSG);
	close(fd);
	close(peer);
}

/* ---- scenario: the signal handler itself writes to a tracked fd --------------------- */
static int handler_fd = -1;
static volatile sig_atomic_t handler_calls, handler_bad;

static void on_alarm_write(int sig)
{
	unsigned char m[MSG];
	int saved = errno;

	(void)sig;
	message(m, (12ULL << 40) | (uint64_t)handler_calls);
	if (!write_all(handler_fd, m, MSG, 0))
		handler_bad++;
	handler_calls++;
	errno = saved;
}

static void scenario_handler_writes(void)
{
	int lfd = listener("tracked.sock"), fd, peer, hpeer, ok;
	struct drain d, hd;

	fd = linked_pair(&peer);
	drain_start(&d, peer, NULL, 0);
	handler_fd = client("tracked.sock");
	hpeer = accept(lfd, NULL, NULL);
	drain_start(&hd, hpeer, NULL, 0);
	handler_calls = handler_bad = 0;
	catch_alarm(on_alarm_write, SA_RESTART);
	arm(200, 200);
	ok = send_n(fd, 13ULL << 40, 20000);
	while (handler_calls < 50)	/* at least some, however fast the loop ran */
		ok += send_n(fd, 14ULL << 40, 1) - 1;
	arm(0, 0);
	catch_alarm(SIG_DFL, 0);
	close(fd);
	close(handler_fd);
	drain_join(&d);
	drain_join(&hd);
	/* how many there were depends on timing: on stderr, for the test's count of records */
	dprintf(2, "info handler_calls=%d\n", (int)handler_calls);
	say("handler_writes: main_ok=%d handler_bad=%d handler_bytes_whole=%d\n", ok,
	    (int)handler_bad, hd.bytes == (unsigned long long)handler_calls * MSG);
	close(peer);
	close(hpeer);
	close(lfd);
}

/* ---- scenario: fds closed and reused ------------------------------------------------ */
static void scenario_close_reuse(void)
{
	int peer, fd = linked_pair(&peer), fd2, r1, r2, r3, dn, other, opeer;
	char name[300];
	unsigned char m[MSG], reused[MSG];
	struct drain d;

	memset(reused, 'R', sizeof(reused));
	memcpy(reused, "REUSED", 6);
	message(m, 15ULL << 40);
	r1 = write_all(fd, m, MSG, 0);
	close(fd);
	path_in(name, sizeof(name), "reuse.bin");
	fd2 = open(name, O_CREAT | O_TRUNC | O_WRONLY, 0600);	/* the lowest free number */
	r2 = (int)write(fd2, reused, MSG);
	/* dup2 of an untracked fd over a tracked one: the number now writes to /dev/null */
	other = linked_pair(&opeer);
	dn = open("/dev/null", O_WRONLY);
	dup2(dn, other);
	r3 = (int)write(other, reused, MSG);
	say("close_reuse: first_ok=%d same_number=%d reused_rc=%d dup2_rc=%d\n", r1, fd2 == fd,
	    r2, r3);
	close(fd2);
	close(dn);
	close(other);
	drain_start(&d, peer, NULL, 0);
	drain_join(&d);
	say("close_reuse: peer_bytes=%llu\n", d.bytes);
	close(peer);
	close(opeer);
}

/* ---- the disk-full run: N messages each from the program and a forked child ---------- */
static void diskfull(int n)
{
	int peer, fd = linked_pair(&peer), status = -1, ok;
	struct drain d;
	pid_t pid;

	drain_start(&d, peer, NULL, 0);
	pid = fork();
	if (pid < 0)
		die("fork");
	if (!pid)
		_exit(send_n(fd, 21ULL << 40, n) == n ? 0 : 6);
	ok = send_n(fd, 20ULL << 40, n);
	waitpid(pid, &status, 0);
	close(fd);
	drain_join(&d);
	say("diskfull: ok=%d child_exit=%d peer_bytes=%llu\n", ok,
	    WIFEXITED(status) ? WEXITSTATUS(status) : -1, d.bytes);
	close(peer);
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "execchild"))
		return exec_child(atoi(argv[2]), atoi(argv[3]));
	if (argc < 3)
		return 2;
	dir = argv[2];
	untracked_listener();
	if (!strcmp(argv[1], "all")) {
		scenario_threads();
		scenario_fork_exec(argv[0]);
		scenario_eintr();
		scenario_restart();
		scenario_handler_writes();
		scenario_close_reuse();
		return 0;
	}
	if (!strcmp(argv[1], "diskfull") && argc == 4) {
		diskfull(atoi(argv[3]));
		return 0;
	}
	return 2;
}

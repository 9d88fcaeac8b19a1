/*
 * ucmaprog.c - drives /dev/infiniband/rdma_cm (a stand-in file in the test's own mount
 * namespace) with real ucma command structs (include/uapi/rdma/rdma_user_cm.h), for
 * tests/test_record_shim.py.  It logs every call it makes to stdout:
 *
 *   CALL <tag> <rc> <errno name> <hex of the bytes written>
 *   RESP <tag> <hex of the response bytes the program holds after the call>
 *
 * so the test can compare the recording with what the program itself did, and the output
 * with and without the recorder.  Buffers are globals in a non-PIE executable, so their
 * addresses (inside the commands) do not move when LD_PRELOAD changes the environment.
 *
 * Usage: ucmaprog BLOB_FILE      the whole sequence (threads, fork, exec, dup, errors)
 *        ucmaprog --exec-child   what the exec'd child does
 *        ucmaprog --bench N      N RESOLVE_ROUTE commands; prints the loop's time (ns)
 *        ucmaprog --fork-storm   threads keep writing while the main thread forks children
 *                                that write too (ids: thread t: 10000 * (t + 1) + i,
 *                                child c: 500 + c); prints "children N"
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_user_cm.h>

#define RDMA_CM "/dev/infiniband/rdma_cm"
#define NTHREADS 4
#define PER_THREAD 25
#define MAX_PATHS 6

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
	struct rdma_ucm_cmd_hdr hdr;
	struct rdma_ucm_create_id cmd;
} create_id;
static struct rdma_ucm_create_id_resp create_id_resp;
static struct {
	struct rdma_ucm_cmd_hdr hdr;
	struct rdma_ucm_resolve_addr cmd;
} resolve_addr;
static struct {
	struct rdma_ucm_cmd_hdr hdr;
	struct rdma_ucm_resolve_route cmd;
} resolve_route[NTHREADS + 2];
static struct {
	struct rdma_ucm_cmd_hdr hdr;
	struct rdma_ucm_set_option cmd;
} set_option;
static unsigned char blob[4096];
static struct {
	struct rdma_ucm_cmd_hdr hdr;
	struct rdma_ucm_query cmd;
} query;
static unsigned char query_resp[sizeof(struct rdma_ucm_query_path_resp) +
				MAX_PATHS * sizeof(struct ib_path_rec_data)];
static struct {
	struct rdma_ucm_cmd_hdr hdr;
	struct rdma_ucm_get_event cmd;
} get_event;
static struct rdma_ucm_event_resp event_resp;
static struct {
	struct rdma_ucm_cmd_hdr hdr;
	struct rdma_ucm_connect cmd;
} connect_cmd;

static const char *errname(int e)
{
	switch (e) {
	case 0: return "0";
	case EBADF: return "EBADF";
	case EFAULT: return "EFAULT";
	case EINVAL: return "EINVAL";
	}
	return "OTHER";
}

static void hex(FILE *f, const void *p, size_t n)
{
	const unsigned char *b = p;
	size_t i;

	for (i = 0; i < n; i++)
		fprintf(f, "%02x", b[i]);
}

/* write() and log it; the log line is printed under a lock, after the call */
static ssize_t call(const char *tag, int fd, const void *buf, size_t len)
{
	ssize_t r = write(fd, buf, len);
	int e = r < 0 ? errno : 0;

	pthread_mutex_lock(&out_lock);
	printf("CALL %s %zd %s ", tag, r, errname(e));
	if ((uintptr_t)buf >= 4096)	/* not the deliberately bad pointer */
		hex(stdout, buf, len);
	printf("\n");
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
	return r;
}

static void resp(const char *tag, const void *buf, size_t len)
{
	pthread_mutex_lock(&out_lock);
	printf("RESP %s ", tag);
	hex(stdout, buf, len);
	printf("\n");
	fflush(stdout);
	pthread_mutex_unlock(&out_lock);
}

static void route(const char *tag, int fd, int slot, unsigned id)
{
	resolve_route[slot].hdr.cmd = RDMA_USER_CM_CMD_RESOLVE_ROUTE;
	resolve_route[slot].hdr.in = sizeof(resolve_route[slot].cmd);
	resolve_route[slot].cmd.id = id;
	resolve_route[slot].cmd.timeout_ms = 2000;
	call(tag, fd, &resolve_route[slot], sizeof(resolve_route[slot]));
}

static void *thread_main(void *arg)
{
	int slot = (int)(long)arg, fd = *(int *)&resolve_route[NTHREADS + 1], i;
	char tag[32];

	for (i = 0; i < PER_THREAD; i++) {
		snprintf(tag, sizeof(tag), "thread%d", slot);
		route(tag, fd, slot, 1000 * (unsigned)(slot + 1) + (unsigned)i);
	}
	return NULL;
}

static int open_cm(int flags)
{
	int fd = open(RDMA_CM, flags);

	if (fd < 0) {
		perror(RDMA_CM);
		exit(2);
	}
	return fd;
}

static int exec_child(void)
{
	int fd = open_cm(O_RDWR | O_CLOEXEC);

	route("exec", fd, 0, 4242);
	close(fd);
	return 0;
}

/* n RESOLVE_ROUTE commands; prints the loop's time in ns (bench/record_overhead.py) */
static int bench(long n)
{
	int fd = open_cm(O_RDWR | O_CLOEXEC);
	struct timespec t0, t1;
	long i;

	resolve_route[0].hdr.cmd = RDMA_USER_CM_CMD_RESOLVE_ROUTE;
	resolve_route[0].hdr.in = sizeof(resolve_route[0].cmd);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < n; i++) {
		resolve_route[0].cmd.id = (unsigned)i;
		if (write(fd, &resolve_route[0], sizeof(resolve_route[0])) < 0)
			return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%lld\n", (long long)(t1.tv_sec - t0.tv_sec) * 1000000000LL +
	       (t1.tv_nsec - t0.tv_nsec));
	return 0;
}

#define STORM_THREADS 2
#define STORM_WRITES 2000
#define STORM_CHILDREN 20

static int storm_fd;

static void *storm_thread(void *arg)
{
	int slot = (int)(long)arg, i;

	resolve_route[slot].hdr.cmd = RDMA_USER_CM_CMD_RESOLVE_ROUTE;
	resolve_route[slot].hdr.in = sizeof(resolve_route[slot].cmd);
	for (i = 0; i < STORM_WRITES; i++) {
		resolve_route[slot].cmd.id = 10000 * (unsigned)(slot + 1) + (unsigned)i;
		if (write(storm_fd, &resolve_route[slot], sizeof(resolve_route[slot])) < 0)
			return (void *)1;
	}
	return NULL;
}

/* fork while other threads hold the recorder's lock now and then: no child may hang */
static int fork_storm(void)
{
	pthread_t th[STORM_THREADS];
	int i, status, ok = 0;

	storm_fd = open_cm(O_RDWR | O_CLOEXEC);
	for (i = 0; i < STORM_THREADS; i++)
		pthread_create(&th[i], NULL, storm_thread, (void *)(long)i);
	for (i = 0; i < STORM_CHILDREN; i++) {
		pid_t pid = fork();
		if (pid == 0) {
			resolve_route[NTHREADS].hdr.cmd = RDMA_USER_CM_CMD_RESOLVE_ROUTE;
			resolve_route[NTHREADS].hdr.in = sizeof(resolve_route[NTHREADS].cmd);
			resolve_route[NTHREADS].cmd.id = 500 + (unsigned)i;
			_exit(write(storm_fd, &resolve_route[NTHREADS],
				    sizeof(resolve_route[NTHREADS])) < 0);
		}
		if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && !WEXITSTATUS(status))
			ok++;
	}
	for (i = 0; i < STORM_THREADS; i++)
		pthread_join(th[i], NULL);
	printf("children %d\n", ok);
	return ok == STORM_CHILDREN ? 0 : 1;
}

int main(int argc, char **argv)
{
	struct sockaddr_in6 *dst;
	pthread_t th[NTHREADS];
	size_t blob_len;
	int fd, fd2, fd3, bad, i, status;
	FILE *f;
	pid_t pid;

	if (argc > 1 && !strcmp(argv[1], "--exec-child"))
		return exec_child();
	if (argc > 2 && !strcmp(argv[1], "--bench"))
		return bench(atol(argv[2]));
	if (argc > 1 && !strcmp(argv[1], "--fork-storm"))
		return fork_storm();
	if (argc < 2) {
		fprintf(stderr, "usage: ucmaprog BLOB_FILE\n");
		return 2;
	}
	f = fopen(argv[1], "rb");
	if (!f) {
		perror(argv[1]);
		return 2;
	}
	blob_len = fread(blob, 1, sizeof(blob), f);
	fclose(f);

	fd = open_cm(O_RDWR | O_CLOEXEC);

	/* CREATE_ID: the stand-in does not answer, so the "kernel's" id is pre-set */
	create_id_resp.id = 7;
	create_id.hdr.cmd = RDMA_USER_CM_CMD_CREATE_ID;
	create_id.hdr.in = sizeof(create_id.cmd);
	create_id.hdr.out = sizeof(create_id_resp);
	create_id.cmd.uid = 0x1122334455667788ULL;
	create_id.cmd.response = (uintptr_t)&create_id_resp;
	create_id.cmd.ps = RDMA_PS_TCP;
	create_id.cmd.qp_type = 2;	/* IBV_QPT_RC */
	call("create_id", fd, &create_id, sizeof(create_id));
	resp("create_id", &create_id_resp, sizeof(create_id_resp));

	resolve_addr.hdr.cmd = RDMA_USER_CM_CMD_RESOLVE_ADDR;
	resolve_addr.hdr.in = sizeof(resolve_addr.cmd);
	resolve_addr.cmd.id = 7;
	resolve_addr.cmd.timeout_ms = 2000;
	resolve_addr.cmd.dst_size = sizeof(struct sockaddr_in6);
	dst = (struct sockaddr_in6 *)&resolve_addr.cmd.dst_addr;
	dst->sin6_family = AF_INET6;
	dst->sin6_port = htons(7471);
	dst->sin6_addr.s6_addr[0] = 0xfe;
	dst->sin6_addr.s6_addr[1] = 0x80;
	dst->sin6_addr.s6_addr[15] = 0x20;
	call("resolve_addr", fd, &resolve_addr, sizeof(resolve_addr));

	route("resolve_route", fd, NTHREADS, 7);

	set_option.hdr.cmd = RDMA_USER_CM_CMD_SET_OPTION;
	set_option.hdr.in = sizeof(set_option.cmd);
	set_option.cmd.optval = (uintptr_t)blob;
	set_option.cmd.id = 7;
	set_option.cmd.level = RDMA_OPTION_IB;
	set_option.cmd.optname = RDMA_OPTION_IB_PATH;
	set_option.cmd.optlen = (unsigned)blob_len;
	call("set_option", fd, &set_option, sizeof(set_option));

	/* QUERY PATH: one path "held by the kernel" (the blob's first record), garbage after */
	memset(query_resp, 0xee, sizeof(query_resp));
	((struct rdma_ucm_query_path_resp *)query_resp)->num_paths = 1;
	((struct rdma_ucm_query_path_resp *)query_resp)->reserved = 0;
	memcpy(query_resp + sizeof(struct rdma_ucm_query_path_resp), blob,
	       sizeof(struct ib_path_rec_data));
	query.hdr.cmd = RDMA_USER_CM_CMD_QUERY;
	query.hdr.in = sizeof(query.cmd);
	query.hdr.out = sizeof(query_resp);
	query.cmd.response = (uintptr_t)query_resp;
	query.cmd.id = 7;
	query.cmd.option = RDMA_USER_CM_QUERY_PATH;
	call("query", fd, &query, sizeof(query));
	resp("query", query_resp, sizeof(struct rdma_ucm_query_path_resp) +
	     sizeof(struct ib_path_rec_data));

	event_resp.uid = 0x1122334455667788ULL;
	event_resp.id = 7;
	event_resp.event = 2;	/* RDMA_CM_EVENT_ROUTE_RESOLVED */
	get_event.hdr.cmd = RDMA_USER_CM_CMD_GET_EVENT;
	get_event.hdr.in = sizeof(get_event.cmd);
	get_event.hdr.out = sizeof(event_resp);
	get_event.cmd.response = (uintptr_t)&event_resp;
	call("get_event", fd, &get_event, sizeof(get_event));
	resp("get_event", &event_resp, sizeof(event_resp));

	connect_cmd.hdr.cmd = RDMA_USER_CM_CMD_CONNECT;
	connect_cmd.hdr.in = sizeof(connect_cmd.cmd);
	connect_cmd.cmd.id = 7;
	connect_cmd.cmd.conn_param.qp_num = 0x123;
	connect_cmd.cmd.conn_param.retry_count = 7;
	connect_cmd.cmd.conn_param.valid = 1;
	call("connect", fd, &connect_cmd, sizeof(connect_cmd));

	/* dup2 and fcntl(F_DUPFD) copies are followed; a closed number is forgotten */
	fd2 = dup2(fd, 50);
	route("dup2", fd2, NTHREADS, 8);
	fd3 = fcntl(fd, F_DUPFD_CLOEXEC, 60);
	route("dupfd", fd3, NTHREADS, 9);
	close(fd3);

	/* errors pass through: a read-only fd (EBADF), a bad pointer (EFAULT) */
	bad = open_cm(O_RDONLY | O_CLOEXEC);
	route("ebadf", bad, NTHREADS, 10);
	close(bad);
	call("efault", fd, (const void *)8, sizeof(resolve_route[0]));

	/* threads share fd (its number is kept in a spare slot of resolve_route) */
	*(int *)&resolve_route[NTHREADS + 1] = fd;
	for (i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, thread_main, (void *)(long)i);
	for (i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);

	/* a forked child keeps recording under its own pid; its exec'd child too */
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		route("fork", fd, NTHREADS, 11);
		fflush(stdout);
		execl("/proc/self/exe", argv[0], "--exec-child", (char *)NULL);
		_exit(3);
	}
	waitpid(pid, &status, 0);

	close(fd);
	close(fd2);
	/* the number 50 now names a plain file: not recorded */
	fd2 = open("/dev/null", O_WRONLY);
	if (fd2 >= 0 && dup2(fd2, 50) == 50)
		route("not_tracked", 50, NTHREADS, 12);
	return 0;
}

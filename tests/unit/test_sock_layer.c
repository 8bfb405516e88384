/* The fd table, socket objects and the transport hook, driven through the
 * interposed calls themselves (the library's objects are linked in). */
#include "unit/unit.h"
#include "lib/core/env.h"
#include "lib/sock/sock.h"
#include "lib/transport/transport.h"
#include "lib/transport/shm/shm.h"
#include "common/reason.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sys/syscall.h>

/* ---- a fake transport: takes connect()ed sockets, counts calls ---------- */
static int offers, sends, recvs, shutdowns, releases;
static int take_offers;

static int fake_offer(struct dsock_sock *s, int fd, int role, void **priv, unsigned *reason)
{
	offers++;
	if (!take_offers || role != DSOCK_ROLE_CONNECT)
		return -ENOTSUP;
	*priv = (void *)0x1;
	return 0;
}

static ssize_t fake_send(struct dsock_sock *s, int fd, const struct msghdr *m, int flags)
{
	size_t n = 0;
	sends++;
	for (size_t i = 0; i < m->msg_iovlen; i++)
		n += m->msg_iov[i].iov_len;
	return (ssize_t)n;
}

static ssize_t fake_recv(struct dsock_sock *s, int fd, struct msghdr *m, int flags)
{
	recvs++;
	if (m->msg_iovlen < 1 || m->msg_iov[0].iov_len < 4)
		return -EINVAL;
	memcpy(m->msg_iov[0].iov_base, "fake", 4);
	return 4;
}

static int fake_shutdown(struct dsock_sock *s, int fd, int how)
{
	shutdowns++;
	return 0;
}

static void fake_release(struct dsock_sock *s)
{
	releases++;
}

static const struct dsock_transport fake = {
	.name = "fake", .offer = fake_offer, .sendmsg = fake_send, .recvmsg = fake_recv,
	.shutdown = fake_shutdown, .release = fake_release,
};

static int listener(struct sockaddr_in *a)
{
	socklen_t len = sizeof(*a);
	int l = socket(AF_INET, SOCK_STREAM, 0);

	memset(a, 0, sizeof(*a));
	a->sin_family = AF_INET;
	a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	bind(l, (struct sockaddr *)a, sizeof(*a));
	listen(l, 16);
	getsockname(l, (struct sockaddr *)a, &len);
	return l;
}

static void test_table_tracks_fds(void)
{
	int fd = socket(AF_INET6, SOCK_DGRAM | SOCK_NONBLOCK, 0), d, d2, p[2];
	struct dsock_sock *s = dsock_fdt_peek(fd), *o;

	ASSERT_TRUE(s != NULL);
	if (!s)
		return;
	ASSERT_EQ(s->domain, AF_INET6);
	ASSERT_EQ(s->type, SOCK_DGRAM);
	ASSERT_TRUE(atomic_load(&s->flags) & DSOCK_SF_NONBLOCK);
	ASSERT_EQ(atomic_load(&s->ref), 1);

	d = dup(fd);
	ASSERT_TRUE(dsock_fdt_peek(d) == s);
	ASSERT_EQ(atomic_load(&s->ref), 2);
	d2 = fcntl(fd, F_DUPFD_CLOEXEC, 100);
	ASSERT_TRUE(d2 >= 100 && dsock_fdt_peek(d2) == s);
	ASSERT_EQ(atomic_load(&s->ref), 3);

	fcntl(fd, F_SETFL, 0);
	ASSERT_TRUE(!(atomic_load(&s->flags) & DSOCK_SF_NONBLOCK));

	ASSERT_EQ(close(fd), 0);
	ASSERT_TRUE(dsock_fdt_peek(fd) == NULL);
	ASSERT_EQ(atomic_load(&s->ref), 2);

	/* dup2 over a tracked socket replaces it and drops the old object */
	int other = socket(AF_INET, SOCK_STREAM, 0);
	o = dsock_fdt_peek(other);
	ASSERT_TRUE(o != NULL && o != s);
	ASSERT_EQ(dup2(d, other), other);
	ASSERT_TRUE(dsock_fdt_peek(other) == s);
	ASSERT_EQ(atomic_load(&o->ref), 0); /* freed: type-stable memory, safe to read */

	/* close_range drops every tracked fd in range */
	ASSERT_EQ(close_range((unsigned)d, (unsigned)d, 0), 0);
	ASSERT_TRUE(dsock_fdt_peek(d) == NULL);
	ASSERT_EQ(close(other), 0);
	ASSERT_EQ(close(d2), 0);
	ASSERT_EQ(atomic_load(&s->ref), 0);

	/* a pipe is not a socket: nothing tracked */
	ASSERT_EQ(pipe(p), 0);
	ASSERT_TRUE(dsock_fdt_peek(p[0]) == NULL && dsock_fdt_peek(p[1]) == NULL);
	close(p[0]);
	close(p[1]);
	ASSERT_EQ(close(fd), -1);
	ASSERT_EQ(errno, EBADF);
}

static void test_transport_hook(void)
{
	struct sockaddr_in a;
	int l = listener(&a), c = socket(AF_INET, SOCK_STREAM, 0), s, c2;
	char buf[16];
	struct iovec v[2] = { { buf, 3 }, { buf, 5 } };
	struct dsock_sock *cs;

	/* not taken: the kernel keeps it, reason recorded */
	take_offers = 0;
	ASSERT_EQ(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	s = accept(l, NULL, NULL);
	ASSERT_TRUE(offers >= 2); /* connect and accept were both offered */
	cs = dsock_fdt_peek(c);
	ASSERT_TRUE(cs && cs->tp == NULL);
	ASSERT_EQ(cs ? cs->reason : -1, DSOCK_R_NO_TRANSPORT);
	ASSERT_EQ(write(c, "abc", 3), 3);
	ASSERT_EQ(read(s, buf, sizeof(buf)), 3);
	ASSERT_EQ(sends + recvs, 0);

	/* taken: every data call goes to the transport */
	take_offers = 1;
	c2 = socket(AF_INET, SOCK_STREAM, 0);
	ASSERT_EQ(connect(c2, (struct sockaddr *)&a, sizeof(a)), 0);
	cs = dsock_fdt_peek(c2);
	ASSERT_TRUE(cs && cs->tp == &fake);
	ASSERT_EQ(cs ? cs->reason : -1, DSOCK_R_NONE);
	ASSERT_EQ(write(c2, "abc", 3), 3);
	ASSERT_EQ(send(c2, "abcd", 4, 0), 4);
	ASSERT_EQ(writev(c2, v, 2), 8);
	ASSERT_EQ(sends, 3);
	memset(buf, 0, sizeof(buf));
	ASSERT_EQ(read(c2, buf, sizeof(buf)), 4);
	ASSERT_STREQ(buf, "fake");
	ASSERT_EQ(recv(c2, buf, 2, 0), -1); /* the transport's -EINVAL becomes errno */
	ASSERT_EQ(errno, EINVAL);
	ASSERT_EQ(recvs, 2);
	ASSERT_EQ(shutdown(c2, SHUT_WR), 0);
	ASSERT_EQ(shutdowns, 1);
	int d = dup(c2);
	ASSERT_EQ(close(c2), 0);
	ASSERT_EQ(releases, 0); /* a dup still refers to it */
	ASSERT_EQ(close(d), 0);
	ASSERT_EQ(releases, 1);
	close(c);
	close(s);
	close(l);
	take_offers = 0;
}

static void test_vfork_child_leaves_table_alone(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), st;
	pid_t pid = vfork();

	if (pid == 0) {
		close(fd); /* the child's own fd table; our memory is shared */
		dup2(2, fd);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	ASSERT_TRUE(dsock_fdt_peek(fd) != NULL);
	ASSERT_EQ(fcntl(fd, F_GETFD) >= 0, 1);
	close(fd);
}

static void test_fork_child_has_copy(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0), st;
	pid_t pid = fork();

	if (pid == 0)
		_exit(dsock_fdt_peek(fd) != NULL && close(fd) == 0 && dsock_fdt_peek(fd) == NULL ? 0 : 1);
	waitpid(pid, &st, 0);
	ASSERT_EQ(WEXITSTATUS(st), 0);
	ASSERT_TRUE(dsock_fdt_peek(fd) != NULL); /* the child's close was its own */
	close(fd);
}

/* Lookups racing with dup/close never see a freed object as live. */
static atomic_int stop;
static int race_fd;

static void *looker(void *arg)
{
	long bad = 0;

	while (!atomic_load(&stop)) {
		struct dsock_sock *s = dsock_fdt_get(race_fd);
		if (s) {
			if (atomic_load(&s->ref) <= 0 || s->domain != AF_INET)
				bad++;
			dsock_sock_put(s);
		}
	}
	return (void *)bad;
}

static void test_concurrent_lookups(void)
{
	pthread_t t[2];
	void *bad;
	long total = 0;

	race_fd = socket(AF_INET, SOCK_STREAM, 0);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, looker, NULL);
	for (int i = 0; i < 20000; i++) {
		int d = dup(race_fd);
		int fresh = socket(AF_INET, SOCK_DGRAM, 0);
		dup2(fresh, race_fd); /* replaces the object at race_fd */
		close(fresh);
		close(d);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], &bad);
		total += (long)bad;
	}
	ASSERT_EQ(total, 0);
	struct dsock_sock *s = dsock_fdt_peek(race_fd);
	ASSERT_TRUE(s && atomic_load(&s->ref) == 1);
	close(race_fd);
}

static void test_exec_env(void)
{
	char *envp[] = { "PATH=/bin", "LD_PRELOAD=/other.so", NULL };
	char *empty[] = { NULL };

	setenv("DSOCK_UNIT_SETTING", "42", 1);
	dsock_env_init();
	const char *lib = dsock_env_lib_path();
	ASSERT_TRUE(lib[0] == '/');
	{
		DSOCK_ENV_FIXED(envp, fixed, 0, AT_FDCWD, "/bin/true", 0, NULL);
		int have_pre = 0, have_set = 0, n = 0, settings = 0;
		for (; fixed[n]; n++) {
			settings += !strncmp(fixed[n], "DSOCK_", 6);
			if (!strncmp(fixed[n], "LD_PRELOAD=", 11)) {
				have_pre = strstr(fixed[n], lib) && strstr(fixed[n], ":/other.so");
			}
			if (!strcmp(fixed[n], "DSOCK_UNIT_SETTING=42"))
				have_set = 1;
		}
		ASSERT_TRUE(have_pre);
		ASSERT_TRUE(have_set);
		ASSERT_EQ(n, 2 + settings); /* PATH, LD_PRELOAD and every DSOCK_ setting */
		/* fixing a fixed environment changes nothing */
		DSOCK_ENV_FIXED((char *const *)fixed, again, 0, AT_FDCWD, "/bin/true", 0, NULL);
		ASSERT_TRUE(again == fixed);
	}
	{
		DSOCK_ENV_FIXED(empty, fixed, 0, AT_FDCWD, "/bin/true", 0, NULL);
		int n = 0, settings = 0;
		for (; fixed[n]; n++)
			settings += !strncmp(fixed[n], "DSOCK_", 6);
		ASSERT_TRUE(!strncmp(fixed[0], "LD_PRELOAD=/", 12));
		ASSERT_EQ(n, 1 + settings);
	}
	{
		/* the program's own DSOCK_ value wins over the inherited one */
		char *own[] = { "DSOCK_UNIT_SETTING=7", NULL };
		DSOCK_ENV_FIXED(own, fixed, 0, AT_FDCWD, "/bin/true", 0, NULL);
		int sevens = 0;
		for (int i = 0; fixed[i]; i++)
			sevens += !strcmp(fixed[i], "DSOCK_UNIT_SETTING=7") - !strcmp(fixed[i], "DSOCK_UNIT_SETTING=42");
		ASSERT_EQ(sevens, 1);
	}
}

int main(int argc, char **argv)
{
	/* the fake transport must be the only one: run without the shm one */
	if (!getenv("DSOCK_FASTPATH")) {
		extern char **environ;
		setenv("DSOCK_FASTPATH", "0", 1);
		/* raw: the linked-in exec wrapper would preload this executable */
		dsock_sys(SYS_execve, "/proc/self/exe", argv, environ);
		return 1;
	}
	ASSERT_EQ(dsock_transport_register(&fake), 0);
	test_table_tracks_fds();
	test_transport_hook();
	test_vfork_child_leaves_table_alone();
	test_fork_child_has_copy();
	test_concurrent_lookups();
	test_exec_env();
	UNIT_DONE();
}

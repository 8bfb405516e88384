/* The pairing result against concurrent calls (the library's objects
 * linked in, the daemon's answer played by hand).
 *
 * A result that could not be attached at once (a send in flight held the
 * connection's mutex) waits for the next call; two threads' next calls (a
 * reader and a writer, as in Python's threaded echo) both find it.  Only
 * one may map it: the attach that maps the memfd closes it, and a second
 * one would fail on the closed fd and send the connection back to the
 * kernel after this side has told the peer it is attached.  The peer then
 * moves its sending to the ring while our reader sits in a plain kernel
 * read: a hang (the server's echo thread on a full ring, the client's
 * reader in `recv`). */
#include "unit/unit.h"
#include "lib/sock/sock.h"
#include "lib/transport/shm/shm.h"
#include "lib/base/real.h"
#include "common/reason.h"
#include "unit/shm_pair.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

static atomic_int go;

struct caller {
	struct dsock_sock *s;
	int fd;
};

static void *progress(void *arg)
{
	struct caller *k = arg;

	while (!atomic_load(&go))
		;
	shm_progress(k->s, k->fd);
	return NULL;
}

static void delayed_result_two_callers(int lfd, struct sockaddr_in *la)
{
	struct conn k;
	unsigned reason;
	pthread_t t[2];

	k.a = socket(AF_INET, SOCK_STREAM, 0);
	if (k.a < 0 || connect(k.a, (struct sockaddr *)la, sizeof(*la)) < 0 ||
	    (k.b = accept(lfd, NULL, NULL)) < 0) {
		perror("loopback pair");
		exit(1);
	}
	make_memfd(&k);
	struct dsock_sock *s = dsock_fdt_get(k.a);
	ASSERT_TRUE(s != NULL);
	if (!s)
		return;
	/* offered and pending, as after the first data call */
	void *priv = NULL;
	ASSERT_EQ(shm_offer(s, k.a, DSOCK_ROLE_CONNECT, &priv, &reason), 0);
	dsock_sock_attach(s, &dsock_shm_transport, priv);
	struct shm_conn *c = shm_conn(s);
	ASSERT_EQ(shm_calibrate(c, k.a), 0);
	c->state = SC_PENDING;
	c->pending_since_ms = dsock_mono_ns() / 1000000;
	/* the result came while a send held the mutex: delayed */
	c->delayed = (struct shm_given){ .memfd = dup(k.memfd), .side = 0, .size = RING };
	c->delayed_set = 1;

	/* both callers find it while the send still holds the mutex (an
	 * attach waits 2 ms for it) */
	pthread_mutex_lock(&c->mu);
	struct caller who = { s, k.a };
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, progress, &who);
	atomic_store(&go, 1);
	usleep(1500);
	pthread_mutex_unlock(&c->mu);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	atomic_store(&go, 0);
	/* (both may have given up waiting for the mutex on a slow machine:
	 * then the next call attaches) */
	shm_progress(s, k.a);

	ASSERT_TRUE(__atomic_load_n(&s->tp, __ATOMIC_ACQUIRE) == &dsock_shm_transport);
	ASSERT_EQ(c->state, SC_ATTACHED);
	ASSERT_EQ(k.h->side[0].attached, DSOCK_ATT_ATTACHED);
	ASSERT_EQ(c->delayed_set, 0);
	dsock_sock_put(s);
	drop_conn(&k);
}

int main(int argc, char **argv)
{
	struct sockaddr_in la;
	int lfd;

	unit_isolate(argv, "TEST_SHM_ATTACH_CHILD");
	(void)argc;
	lfd = loopback_listener(&la);
	if (lfd < 0)
		return 1;
	/* the two callers meet in most rounds, not all: four rounds */
	for (int i = 0; i < 4; i++)
		delayed_result_two_callers(lfd, &la);
	UNIT_DONE();
}

/* Sending to clients: one message, and results waiting for room in a
 * library's control socket (outbox.h). */
#include "daemon/outbox.h"
#include "common/fdpass.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static uint32_t out_seq;

int dd_send_msg_fd(int fd, uint16_t type, const void *payload, size_t len, int pass_fd, int flags)
{
	union { struct dsock_msg_hdr h; char b[DSOCK_MSG_MAX]; } m;
	union dsock_cmsg_one cm;
	struct iovec v;
	struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1 };

	if (sizeof(m.h) + len > sizeof(m))
		return -EMSGSIZE;
	dsock_msg_init(&m.h, type, len, ++out_seq);
	if (len)
		memcpy(m.b + sizeof(m.h), payload, len);
	v.iov_base = m.b;
	v.iov_len = sizeof(m.h) + len;
	dsock_cmsg_put_fd(&mh, &cm, pass_fd);
	return sendmsg(fd, &mh, MSG_NOSIGNAL | flags) < 0 ? -errno : 0;
}

int dd_send_transient(int rc)
{
	return rc == -EAGAIN || rc == -ENOBUFS || rc == -ETOOMANYREFS || rc == -ENOMEM;
}

static int grow(struct dd_outbox *o)
{
	size_t cap = o->cap ? o->cap * 2 : 64;
	struct dd_out *q = malloc(cap * sizeof(*q));

	if (!q)
		return -ENOMEM;
	for (size_t i = 0; i < o->n; i++) /* unwrapped: oldest at 0 */
		q[i] = o->q[(o->head + i) & (o->cap - 1)];
	free(o->q);
	o->q = q;
	o->head = 0;
	o->cap = cap;
	return 0;
}

int dd_outbox_push(struct dd_outbox *o, const struct dsock_msg_result *r, int fd)
{
	int dup_fd = -1;

	if (o->n >= DD_OUTBOX_MAX)
		return -ENOBUFS;
	if (o->n == o->cap && grow(o))
		return -ENOMEM;
	/* the caller's fd is closed when it returns (a pair's memfd once
	 * both results are out): the outbox keeps its own */
	if (fd >= 0 && (dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)) < 0)
		return -errno;
	o->q[(o->head + o->n) & (o->cap - 1)] = (struct dd_out){ .r = *r, .fd = dup_fd };
	o->n++;
	return 0;
}

const struct dd_out *dd_outbox_peek(const struct dd_outbox *o)
{
	return &o->q[o->head & (o->cap - 1)];
}

void dd_outbox_pop(struct dd_outbox *o)
{
	struct dd_out *e = &o->q[o->head & (o->cap - 1)];

	if (e->fd >= 0)
		close(e->fd);
	o->head = (o->head + 1) & (o->cap - 1);
	o->n--;
}

int dd_outbox_flush(struct dd_outbox *o, int fd, unsigned *sent)
{
	*sent = 0;
	while (o->n) {
		const struct dd_out *e = dd_outbox_peek(o);
		int rc = dd_send_msg_fd(fd, DSOCK_MSG_RESULT, &e->r, sizeof(e->r), e->fd, MSG_DONTWAIT);
		if (rc)
			return rc;
		dd_outbox_pop(o);
		(*sent)++;
	}
	return 0;
}

void dd_outbox_clear(struct dd_outbox *o)
{
	while (o->n)
		dd_outbox_pop(o);
	free(o->q);
	*o = (struct dd_outbox){ 0 };
}

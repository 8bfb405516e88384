/* Control-protocol validation: every malformed message is refused. */
#include "unit/unit.h"
#include "common/proto.h"
#include "common/reason.h"

#include <errno.h>
#include <sys/socket.h>

static union { struct dsock_msg_hdr h; char b[DSOCK_MSG_MAX + 64]; } m;

static size_t hello(void)
{
	struct dsock_msg_hello *p = (void *)(m.b + sizeof(m.h));

	memset(&m, 0, sizeof(m));
	dsock_msg_init(&m.h, DSOCK_MSG_HELLO, sizeof(*p), 1);
	strcpy(p->comm, "redis-server");
	strcpy(p->lib_version, "0.1.0");
	return sizeof(m.h) + sizeof(*p);
}

static size_t event(void)
{
	struct dsock_msg_sock_event *e = (void *)(m.b + sizeof(m.h));

	memset(&m, 0, sizeof(m));
	dsock_msg_init(&m.h, DSOCK_MSG_SOCK_EVENT, sizeof(*e), 2);
	e->event = DSOCK_EV_CONNECT;
	e->fd = 5;
	e->state = DSOCK_ST_CONNECTED;
	e->path = DSOCK_PATH_KERNEL;
	e->reason = DSOCK_R_NO_TRANSPORT;
	e->local.family = AF_INET;
	return sizeof(m.h) + sizeof(*e);
}

/* A message of type with the payload p (len bytes); returns its length. */
static size_t with(unsigned type, const void *p, size_t len)
{
	memset(&m, 0, sizeof(m));
	dsock_msg_init(&m.h, (uint16_t)type, len, 3);
	memcpy(m.b + sizeof(m.h), p, len);
	return sizeof(m.h) + len;
}

/* Offers, results and fetches name a transport (and offers a proof):
 * an unknown or kernel one, or stray padding, is refused. */
static void transport_ids(void)
{
	struct dsock_msg_offer o = { .sock_id = 1, .role = DSOCK_OFFER_CONNECT, .transport = DSOCK_PATH_SHM,
				     .proof = DSOCK_PROOF_NETNS };
	struct dsock_msg_fetch f = { .sock_id = 1, .transport = DSOCK_PATH_SHM };
	struct dsock_msg_result r = { .sock_id = 1, .transport = DSOCK_PATH_SHM, .result = DSOCK_RES_PAIRED };

	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_OFFER, &o, sizeof(o))), 0);
	o.transport = DSOCK_PATH_KERNEL;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_OFFER, &o, sizeof(o))), -EBADMSG);
	o.transport = DSOCK_PATH_MAX + 1;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_OFFER, &o, sizeof(o))), -EBADMSG);
	o.transport = DSOCK_PATH_SHM;
	o.proof = 0;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_OFFER, &o, sizeof(o))), -EBADMSG);
	o.proof = DSOCK_PROOF_MAX + 1;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_OFFER, &o, sizeof(o))), -EBADMSG);

	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_FETCH, &f, sizeof(f))), 0);
	f.pad[1] = 1;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_FETCH, &f, sizeof(f))), -EBADMSG);
	f.pad[1] = 0;
	f.transport = 0;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_FETCH, &f, sizeof(f))), -EBADMSG);

	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), 0);
	r.transport = DSOCK_PATH_KERNEL;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), -EBADMSG);
	r.result = DSOCK_RES_PEER; /* a lent socket is no transport's */
	r.transport = 0;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), 0);
	r.transport = DSOCK_PATH_SHM;
	r.result = DSOCK_RES_HELD;
	r.link = 1; /* only PAIRED, LINK and POOL name a link */
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), -EBADMSG);
	r.result = DSOCK_RES_LINK;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), 0);
	r.link_side = 2; /* a link has two sides */
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), -EBADMSG);
	r.link_side = 0;
	r.pool = 3; /* only PAIRED and POOL name a pool */
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), -EBADMSG);
	r.result = DSOCK_RES_POOL;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), 0);
	r.pool_page = 2; /* only PAIRED and FETCHED name a page */
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), -EBADMSG);
	r.result = DSOCK_RES_PAIRED;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), 0);
	r.pool = r.pool_page = 0;
	r.result = DSOCK_RES_BELL; /* a link's peer's bell */
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), 0);
	r.result = DSOCK_RES_BELL + 1;
	ASSERT_EQ(dsock_msg_check(m.b, with(DSOCK_MSG_RESULT, &r, sizeof(r))), -EBADMSG);
}

int main(void)
{
	size_t n;
	struct dsock_msg_hello *hp = (void *)(m.b + sizeof(m.h));
	struct dsock_msg_sock_event *ep = (void *)(m.b + sizeof(m.h));

	n = hello();
	ASSERT_EQ(dsock_msg_check(m.b, n), 0);
	ASSERT_EQ(dsock_msg_check(m.b, n - 1), -EBADMSG);   /* short */
	ASSERT_EQ(dsock_msg_check(m.b, 3), -EBADMSG);       /* shorter than a header */
	ASSERT_EQ(dsock_msg_check(m.b, DSOCK_MSG_MAX + 1), -EMSGSIZE);
	n = hello(); m.h.magic ^= 1;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = hello(); m.h.version = DSOCK_PROTO_VERSION + 1;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EPROTO);
	n = hello(); m.h.type = 0;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = hello(); m.h.type = 99;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = hello(); m.h.len = (uint32_t)n + 1;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = hello(); memset(hp->comm, 'a', sizeof(hp->comm)); /* no NUL */
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = hello(); hp->comm[0] = '\n';                         /* not printable */
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = hello(); hp->flags = 0x80;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = hello(); hp->ppid = -1;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);

	n = event();
	ASSERT_EQ(dsock_msg_check(m.b, n), 0);
	n = event(); ep->event = 0;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = event(); ep->event = DSOCK_EV_MAX + 1;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = event(); ep->fd = -3;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = event(); ep->reason = DSOCK_R_MAX;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = event(); ep->path = 9;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = event(); ep->peer.family = 77;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);
	n = event(); ep->pad = 1;
	ASSERT_EQ(dsock_msg_check(m.b, n), -EBADMSG);

	/* requests without payload must have none */
	memset(&m, 0, sizeof(m));
	dsock_msg_init(&m.h, DSOCK_MSG_STAT_REQ, 0, 3);
	ASSERT_EQ(dsock_msg_check(m.b, sizeof(m.h)), 0);
	dsock_msg_init(&m.h, DSOCK_MSG_STAT_REQ, 4, 3);
	ASSERT_EQ(dsock_msg_check(m.b, sizeof(m.h) + 4), -EBADMSG);

	/* names and formatting */
	struct dsock_addr a = { .family = AF_INET, .port = 80 };
	char buf[64];
	a.addr[10] = a.addr[11] = 0xff;
	a.addr[12] = 127; a.addr[15] = 1;
	dsock_addr_format(&a, buf, sizeof(buf));
	ASSERT_STREQ(buf, "127.0.0.1:80");
	a.family = AF_INET6;
	memset(a.addr, 0, 16); a.addr[15] = 1;
	dsock_addr_format(&a, buf, sizeof(buf));
	ASSERT_STREQ(buf, "[::1]:80");
	ASSERT_STREQ(dsock_reason_name(DSOCK_R_NOT_TCP), "not-tcp");
	ASSERT_STREQ(dsock_reason_name(999), "?");
	for (unsigned r = 0; r < DSOCK_R_MAX; r++)
		ASSERT_TRUE(dsock_reason_name(r) != NULL);
	transport_ids();
	UNIT_DONE();
}

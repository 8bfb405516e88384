/* The kernel-recorded proof of identity (docs/ARCHITECTURE.md, "Proof
 * across namespaces"): BPF programs that dsockd attaches at the cgroup-v2
 * root.  A socket opts in with setsockopt(SOL_DSOCK, DSOCK_OPTIN) before
 * connect() or listen() (the cgroup/setsockopt program gives it a record
 * marked so; no privilege, no bpf(2); a listener's children inherit it).
 * An opted-in client's SYN carries an RFC 6994 option (kind 254, ExID
 * 0xd50c) with a nonce Nc (a keyed hash of the socket's cookie and a
 * random word: unpredictable to anyone without the boot's key, since
 * bpf_get_prandom_u32 alone is not a cryptographic source and Nc is
 * presented to other hosts' daemons); an opted-in listener answers in its
 * SYN-ACK with Ns, a keyed hash of Nc, its ISN, the ports and its network
 * namespace, and only when the SYN carried Nc (a plain peer never sees
 * the option).  The client echoes Nc in its next segments (the third ACK,
 * DSOCK_IDENT_ECHOES of them), from which the accepted child computes Ns
 * again: the listener keeps no state per SYN, saves no SYN, and a child
 * made from a SYN cookie is proven as any other.  Each end's record
 * (sent, recv) lives in socket-local storage that only this program
 * writes: two sockets are the two ends of one connection if and only if
 * each received what the other sent, whatever NAT did to their
 * addresses.  A SYN without the option, an echo that never came, TCP
 * Fast Open or a full option space leave a record incomplete: no match,
 * the connection stays on the kernel.
 *
 * Built with clang -target bpf; no BTF of the running kernel needed (only
 * UAPI structs). */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "common/ident.h"

#define TCPHDR_SYN 0x02
#define TCPHDR_ACK 0x10
#define ENOENT 2

struct tcp_head { /* the fields read here */
	__u16 source, dest;
	__u32 seq, ack_seq;
};

/* One record per opted-in socket, made by the mark (one allocation per
 * end: a child's is its listener's, cloned by the kernel). */
struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC | BPF_F_CLONE);
	__type(key, int);
	__type(value, struct dsock_ident_rec);
} dsock_ident SEC(".maps");

struct key128 {
	__u64 k0, k1;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct key128);
} dsock_key SEC(".maps"); /* written once by dsockd (getrandom) before it attaches */

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                              \
	do {                                                                  \
		v0 += v1; v1 = ROTL(v1, 13); v1 ^= v0; v0 = ROTL(v0, 32);     \
		v2 += v3; v3 = ROTL(v3, 16); v3 ^= v2;                        \
		v0 += v3; v3 = ROTL(v3, 21); v3 ^= v0;                        \
		v2 += v1; v1 = ROTL(v1, 17); v1 ^= v2; v2 = ROTL(v2, 32);     \
	} while (0)

/* SipHash-2-4 of three words under the boot's key. */
static __always_inline __u64 siphash3(const struct key128 *k, __u64 a, __u64 b, __u64 c)
{
	__u64 v0 = 0x736f6d6570736575ULL ^ k->k0, v1 = 0x646f72616e646f6dULL ^ k->k1;
	__u64 v2 = 0x6c7967656e657261ULL ^ k->k0, v3 = 0x7465646279746573ULL ^ k->k1;
	__u64 m[4] = { a, b, c, (__u64)24 << 56 };

#pragma unroll
	for (int i = 0; i < 4; i++) {
		v3 ^= m[i];
		SIPROUND;
		SIPROUND;
		v0 ^= m[i];
	}
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

/* The listener's nonce for a SYN that carried nc: computed, not stored,
 * so a SYN costs no state (the child computes it again from the echo). */
static __always_inline __u64 server_nonce(struct bpf_sock_ops *skops, __u64 nc, __u32 isn)
{
	__u32 zero = 0;
	struct key128 *k = bpf_map_lookup_elem(&dsock_key, &zero);
	__u64 ports = (__u64)isn << 32 | (__u64)(skops->local_port & 0xffff) << 16 |
		      (bpf_ntohl(skops->remote_port) & 0xffff);
	__u64 ns;

	if (!k)
		return 0;
	ns = siphash3(k, nc, ports, bpf_get_netns_cookie(skops));
	return ns ? ns : 1;
}

/* A connecting socket's nonce: SipHash under the boot's key, tweaked so
 * that no client nonce is computed as a listener's is, of the socket's
 * cookie (never reused in a boot) and a random word. */
static __always_inline __u64 client_nonce(struct bpf_sock_ops *skops)
{
	__u32 zero = 0;
	struct key128 *k = bpf_map_lookup_elem(&dsock_key, &zero), ck;
	__u64 r = (__u64)bpf_get_prandom_u32() << 32 | bpf_get_prandom_u32(), n;

	if (!k)
		return 0;
	ck.k0 = k->k0 ^ 0x636c69656e74ULL; /* "client" */
	ck.k1 = k->k1;
	n = siphash3(&ck, bpf_get_socket_cookie(skops), r, bpf_get_netns_cookie(skops));
	return n ? n : 1;
}

/* The nonce in our option of the segment at hand (flags 0) or of the SYN
 * (BPF_LOAD_HDR_OPT_TCP_SYN), or 0. */
static __always_inline __u64 load_nonce(struct bpf_sock_ops *skops, __u64 flags)
{
	__u8 o[DSOCK_IDENT_OPT_LEN] = { DSOCK_IDENT_OPT_KIND, 4, DSOCK_IDENT_EXID_HI, DSOCK_IDENT_EXID_LO };
	__u64 n;

	if (bpf_load_hdr_opt(skops, o, sizeof(o), flags) != DSOCK_IDENT_OPT_LEN || o[1] != DSOCK_IDENT_OPT_LEN)
		return 0;
	__builtin_memcpy(&n, o + 4, sizeof(n));
	return n;
}

/* The socket's record, or NULL (a request sock has none). */
static __always_inline struct dsock_ident_rec *record(struct bpf_sock_ops *skops)
{
	struct bpf_sock *sk = skops->sk;

	return sk ? bpf_sk_storage_get(&dsock_ident, sk, 0, 0) : 0;
}

static __always_inline void write_flag(struct bpf_sock_ops *skops, int on)
{
	int f = skops->bpf_sock_ops_cb_flags;

	bpf_sock_ops_cb_flags_set(skops, on ? f | BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG
					    : f & ~BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG);
}

static __always_inline int on_connect(struct bpf_sock_ops *skops)
{
	struct dsock_ident_rec *r = record(skops);

	if (!r || !(r->flags & DSOCK_IDENT_MARKED))
		return 1;
	r->sent = client_nonce(skops);
	if (!r->sent)
		return 1; /* no key: no nonce, no option, no record to match */
	r->recv = 0;
	r->netns = bpf_get_netns_cookie(skops);
	r->flags = DSOCK_IDENT_MARKED | DSOCK_IDENT_ACTIVE;
	r->version = DSOCK_IDENT_VERSION;
	r->echoes = 0;
	write_flag(skops, 1);
	return 1;
}

/* the listener's flags decide its SYN-ACKs */
static __always_inline int on_listen(struct bpf_sock_ops *skops)
{
	struct dsock_ident_rec *r = record(skops);

	if (r && (r->flags & DSOCK_IDENT_MARKED))
		write_flag(skops, 1);
	return 1;
}

static __always_inline int on_hdr_len(struct bpf_sock_ops *skops)
{
	__u8 f = skops->skb_tcp_flags;

	if (skops->args[0] == BPF_WRITE_HDR_TCP_CURRENT_MSS || !(f & TCPHDR_SYN)) {
		/* the echo's room, in the MSS too while it is due */
		struct dsock_ident_rec *r = record(skops);
		if (r && (r->flags & DSOCK_IDENT_ECHO))
			bpf_reserve_hdr_opt(skops, DSOCK_IDENT_OPT_LEN, 0);
		return 1;
	}
	if ((f & TCPHDR_ACK) && !load_nonce(skops, BPF_LOAD_HDR_OPT_TCP_SYN))
		return 1; /* a SYN-ACK answers only a SYN that carried ours */
	bpf_reserve_hdr_opt(skops, DSOCK_IDENT_OPT_LEN, 0);
	return 1;
}

static __always_inline int on_hdr_write(struct bpf_sock_ops *skops)
{
	__u8 o[DSOCK_IDENT_OPT_LEN] = { DSOCK_IDENT_OPT_KIND, DSOCK_IDENT_OPT_LEN, DSOCK_IDENT_EXID_HI,
					DSOCK_IDENT_EXID_LO };
	__u8 f = skops->skb_tcp_flags;
	struct dsock_ident_rec *r;
	__u64 n;

	if (!(f & TCPHDR_SYN)) { /* the echo, after the SYN-ACK */
		if (!(r = record(skops)) || !(r->flags & DSOCK_IDENT_ECHO))
			return 1;
		n = r->sent;
		if (r->echoes <= 1) {
			r->flags &= ~DSOCK_IDENT_ECHO;
			write_flag(skops, 0);
		}
		r->echoes--;
	} else if (!(f & TCPHDR_ACK)) { /* our SYN */
		if (!(r = record(skops)) || !(r->flags & DSOCK_IDENT_ACTIVE))
			return 1;
		n = r->sent;
	} else { /* a SYN-ACK: a request sock, only its ports and the header */
		struct tcp_head *th = (void *)(long)skops->skb_data;
		__u64 nc = load_nonce(skops, BPF_LOAD_HDR_OPT_TCP_SYN);
		if (!nc || (void *)(th + 1) > (void *)(long)skops->skb_data_end)
			return 1;
		n = server_nonce(skops, nc, bpf_ntohl(th->seq));
		if (!n)
			return 1;
	}
	__builtin_memcpy(o + 4, &n, sizeof(n));
	bpf_store_hdr_opt(skops, o, sizeof(o), 0);
	return 1;
}

static __always_inline int on_active(struct bpf_sock_ops *skops)
{
	struct dsock_ident_rec *r = record(skops);
	__u64 ns;

	if (!r || !(r->flags & DSOCK_IDENT_ACTIVE))
		return 1;
	ns = load_nonce(skops, 0); /* the SYN-ACK's */
	if (!ns) {
		write_flag(skops, 0);
		return 1; /* a plain peer: half a record, never a match */
	}
	r->recv = ns;
	r->flags |= DSOCK_IDENT_GOT_PEER | DSOCK_IDENT_HANDSHAKE | DSOCK_IDENT_ECHO;
	r->echoes = DSOCK_IDENT_ECHOES; /* (the write flag stays on for them) */
	return 1;
}

/* The child of a marked listener, at the segment that made it: the third
 * ACK (or the first data segment, or a SYN cookie's ACK), which echoes
 * the client's nonce and acknowledges our ISN + 1. */
static __always_inline int on_passive(struct bpf_sock_ops *skops)
{
	struct tcp_head *th = (void *)(long)skops->skb_data;
	struct dsock_ident_rec *r = record(skops);
	__u64 nc, ns;

	if (!r || !(r->flags & DSOCK_IDENT_MARKED))
		return 1;
	write_flag(skops, 0); /* (inherited from the listener) */
	nc = load_nonce(skops, 0);
	if (!nc || (void *)(th + 1) > (void *)(long)skops->skb_data_end)
		return 1; /* a plain client, or no echo: a mark alone, no record to match */
	ns = server_nonce(skops, nc, bpf_ntohl(th->ack_seq) - 1);
	if (!ns)
		return 1;
	r->sent = ns;
	r->recv = nc;
	r->netns = bpf_get_netns_cookie(skops);
	r->flags = DSOCK_IDENT_MARKED | DSOCK_IDENT_PASSIVE | DSOCK_IDENT_GOT_PEER | DSOCK_IDENT_HANDSHAKE;
	r->version = DSOCK_IDENT_VERSION;
	r->echoes = 0;
	return 1;
}

SEC("sockops")
int dsock_sockops(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_TCP_CONNECT_CB:
		return on_connect(skops);
	case BPF_SOCK_OPS_TCP_LISTEN_CB:
		return on_listen(skops);
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		return on_hdr_len(skops);
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB:
		return on_hdr_write(skops);
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		return on_active(skops);
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		return on_passive(skops);
	}
	return 1;
}

/* setsockopt(fd, SOL_DSOCK, DSOCK_OPTIN, ...): marks the socket (a new
 * record, or the one it has left as it is), the kernel's handler
 * skipped.  Any other option passes through. */
SEC("cgroup/setsockopt")
int dsock_setsockopt(struct bpf_sockopt *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	struct dsock_ident_rec *r;

	if (ctx->level != DSOCK_SOL || ctx->optname != DSOCK_OPTIN)
		return 1;
	if (!sk || !(r = bpf_sk_storage_get(&dsock_ident, sk, 0, BPF_SK_STORAGE_GET_F_CREATE)))
		return 0; /* EPERM: not marked */
	if (!r->version) { /* made now (zeroed) */
		r->flags = DSOCK_IDENT_MARKED;
		r->version = DSOCK_IDENT_VERSION;
	}
	ctx->optlen = -1;
	return 1;
}

/* getsockopt(fd, SOL_DSOCK, DSOCK_IDENTITY, rec, &len): the socket's
 * record, read-only (ENOENT: none). */
SEC("cgroup/getsockopt")
int dsock_getsockopt(struct bpf_sockopt *ctx)
{
	struct bpf_sock *sk = ctx->sk;
	struct dsock_ident_rec *r;
	void *v = ctx->optval;

	if (ctx->level != DSOCK_SOL || ctx->optname != DSOCK_IDENTITY)
		return 1;
	if (!sk)
		return 1;
	r = bpf_sk_storage_get(&dsock_ident, sk, 0, 0);
	if (!r) {
		ctx->retval = -ENOENT;
		return 1;
	}
	if (v + sizeof(*r) > ctx->optval_end)
		return 1; /* (the kernel's answer stands) */
	__builtin_memcpy(v, r, sizeof(*r));
	ctx->optlen = sizeof(*r);
	asm volatile("" ::: "memory"); /* two stores, not one 8-byte store the verifier refuses */
	ctx->retval = 0;
	return 1;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

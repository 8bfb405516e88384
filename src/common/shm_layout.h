/* The layout of a connection's shared memory (a slot in a pool: one memfd
 * per pair of processes holding the connections between them, created
 * and sealed by dsockd, mapped by exactly those two processes; or a memfd
 * of its own where the two have no link).
 *
 *   page 0     header: sides, ring control (each writer on its own lines)
 *   page 1..   ring 0 data (side 0 -> side 1), ring_size bytes
 *   then       ring 1 data (side 1 -> side 0), ring_size bytes
 *
 * Only offsets and free-running byte counters live here, never pointers.
 * Both processes can write every byte of it, so a reader trusts nothing:
 * ring_size and the layout are read once at attach and kept privately, and
 * every index is checked (0 <= tail - head <= ring_size, monotonic) before
 * use; a violation resets that connection only. */
#ifndef DSOCK_SHM_LAYOUT_H
#define DSOCK_SHM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define DSOCK_SHM_MAGIC    0x52485344u /* "DSHR" */
#define DSOCK_SHM_VERSION  11
#define DSOCK_SHM_HDR      4096u
#define DSOCK_RING_MIN     (4u << 10)
#define DSOCK_RING_MAX     (64u << 20)
#define DSOCK_RING_DEFAULT (256u << 10)
#define DSOCK_SWITCH_NONE  UINT64_MAX
#define DSOCK_CL 64

/* tx_lock: the word names a bias owner (a thread id is below 2^22) */
#define DSOCK_LOCK_BIAS 0x80000000u

enum { DSOCK_ATT_NONE = 0, DSOCK_ATT_ATTACHED = 1, DSOCK_ATT_REFUSED = 2 };
/* side.back_req: why this side asks both directions back to the kernel */
enum { DSOCK_BACK_HANDOVER = 1, DSOCK_BACK_ASLEEP = 2, DSOCK_BACK_URGENT = 3, DSOCK_BACK_RCVLOWAT = 4 };
/* ring.tx_waiting bits: a poller wants a space token on its kernel socket;
 * a blocked sender sleeps on the space_seq futex only */
enum { DSOCK_TXW_POLL = 1, DSOCK_TXW_FUTEX = 2 };

/* Written by its own side only. */
struct dsock_shm_side {
	uint32_t attached;    /* DSOCK_ATT_* */
	uint32_t rx_switched; /* 1: every kernel byte this side receives is a token */
	uint64_t switch_off;  /* kernel data bytes this side sent before its
			       * sending moved to the ring; DSOCK_SWITCH_NONE before */
	uint32_t closing;     /* hint: this side closed or shut down writing */
	uint32_t cpu;         /* hint: the CPU this side last sent from (+1; 0 unknown) */
	uint64_t kread;       /* kernel bytes this side's readers consumed since the
			       * offer, while the peer's switch offset still
			       * mattered (rx lock held): the kernel's own counter
			       * cannot say whether it includes a FIN once the
			       * socket is closed */
	uint32_t holders;     /* processes holding this side's socket (attach: 1;
			       * +1 per fork child and spawned adopter, -1 per
			       * close); only the last one's close ends the
			       * connection here */
	uint32_t back_req;    /* this side asks both directions back onto the
			       * kernel: DSOCK_BACK_HANDOVER (its socket goes
			       * to a holder without dsock: exec, SCM_RIGHTS)
			       * or DSOCK_BACK_ASLEEP (its consumer slept at
			       * nearly every write: tokens cost more than the
			       * ring saves), DSOCK_BACK_URGENT (it sends urgent
			       * data), DSOCK_BACK_RCVLOWAT (it set SO_RCVLOWAT);
			       * any other nonzero value asks too */
	uint32_t back_sent;   /* 1: this side's sending is back on the kernel */
	uint32_t link_slot;   /* this side's number for the connection in its
			       * process's link with the peer's (below): what
			       * the peer pushes on the link's queue; 0: none
			       * (the peer wakes this side by tokens only) */
	uint64_t back_off;    /* then: kernel bytes this side sent before plain
			       * data resumed (data before its switch, then
			       * tokens); right after them come the ring bytes
			       * its consumer had not read, then new data.
			       * back_off and back_sent are this side's, or the
			       * peer's when it moves this side's sending for
			       * it, under this side's locks (a hand-over the
			       * peer makes alone: handover.c, peer_back) */
	int64_t tx_base;      /* the kernel's sent-byte counter of this side's
			       * socket at the stream's first byte (attach):
			       * what the peer needs to count this side's
			       * kernel bytes in such a hand-over */
} __attribute__((aligned(DSOCK_CL)));
_Static_assert(sizeof(struct dsock_shm_side) == DSOCK_CL, "a side is one cache line");

/* Ring r carries data from side r to side 1 - r. */
struct dsock_shm_ring {
	/* producer's line: the consumer reads it on every look at the ring */
	uint64_t tail;        /* bytes ever written */
	uint32_t tx_waiting;  /* producer waits for space (DSOCK_TXW_*): the
			       * consumer bumps space_seq and wakes the futex,
			       * and tokens a poller */
	uint32_t pad5;
	uint64_t map;         /* where byte i lies: at (i + shift) & (width - 1),
			       * width the low 32 bits (a power of two from
			       * DSOCK_RING_MIN to ring_size; 0: DSOCK_RING_MIN),
			       * shift the high 32.  One word, so that a reader
			       * sees both of one change.  The producer widens
			       * the ring (tx lock held) only when the bytes in
			       * flight keep their places: the ring empty, or
			       * those bytes in one stretch of the old width,
			       * which the new shift then puts where they are;
			       * stored before the tail that follows.  A
			       * connection of small messages touches one page
			       * of its ring, not all of it */
	uint8_t pad0[DSOCK_CL - 24];
	/* producer's lock line, apart: a lock word on the tail's line would
	 * cost each send a cache-line transfer for the lock and another for
	 * the unlock (the consumer reads the line in between) */
	uint32_t tx_lock;     /* tid holding the producer side (threads, fork),
			       * or DSOCK_LOCK_BIAS | tid: biased to that
			       * thread, which then enters with no locked
			       * instruction (shm_tx_lock) */
	uint32_t bias_busy;   /* the bias owner is inside */
	uint64_t tail_writer; /* who stored tail last (pid << 32 | its
			       * connection's number there): that producer
			       * may use its own copy of tail, not this line's */
	uint32_t bias_off;    /* a bias was revoked: never biased again */
	uint8_t pad4[DSOCK_CL - 20];
	/* consumer's line */
	uint64_t head;        /* bytes ever read */
	uint32_t rx_lock;
	uint8_t pad1[DSOCK_CL - 12];
	/* consumer's lease line: read by the producer on every send, so it
	 * is rewritten only when the lease really changes */
	uint64_t lease_until;   /* consumer polls until this CLOCK_MONOTONIC ns:
			       * no token needed before then */
	uint8_t pad3[DSOCK_CL - 8];
	/* shared line: set by the producer, cleared by the consumer */
	uint32_t token;       /* a wake-up byte is in the consumer's kernel socket */
	uint32_t space_seq;   /* futex word: bumped when the consumer frees space */
	uint32_t space_token; /* a space wake-up byte is in the producer's socket */
	uint8_t pad2[DSOCK_CL - 12];
} __attribute__((aligned(DSOCK_CL)));

struct dsock_shm_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t ring_size;
	uint32_t data_off;
	uint32_t maps[2];     /* processes that have side i's part of this
			       * memory in use and may still touch it (attach,
			       * fork child, spawned adopter: +1; the last
			       * release of the connection in that process,
			       * just before it lets go of the memory: -1).
			       * dsockd gives a pool's slot to a new
			       * connection only when both are 0 */
	uint8_t pad[DSOCK_CL - 24];
	struct dsock_shm_side side[2];
	struct dsock_shm_ring ring[2];
};

_Static_assert(sizeof(struct dsock_shm_hdr) <= DSOCK_SHM_HDR, "header fits its page");

/* A link: the shared memory of two processes that have connections on
 * the rings between them (one memfd per pair of processes, made by dsockd
 * at their first pairing and handed to those two only).  It holds one
 * queue per direction: queue q carries arrivals from the process on side
 * q of the link to the other.  A producer whose consumer has no lease on
 * its ring but a lease on the link (one of the consumer's pollers looks at
 * the queue, see the transport's docs) pushes the consumer's slot of the
 * connection (side.link_slot) instead of a wake-up token, at most one
 * entry per ring at a time (the producer keeps the queue position of its
 * last one, taken once the consumer's head passes it); the consumer's
 * poller takes the entries and looks at those rings only.
 *
 *   page 0   header
 *   page 1   queue 0's entries (uint32_t slots, DSOCK_LINK_SLOTS of them)
 *   page 2   queue 1's entries
 *
 * An entry is the slot number (below 2^20) with the lap of its position
 * in the bits above (DSOCK_LINK_LAP_SHIFT): position i holds an entry
 * from lap dsock_link_lap(i), or from the lap before, never yet written.
 * So the consumer polls the entry at its head alone, and one cache line
 * brings it the news and what it names (a separate tail would be a second
 * line crossing between the two CPUs per message).
 *
 * Either process can write all of it: the consumer checks that an entry's
 * lap is its position's or the one before (anything else breaks the
 * link for it) and that the slot is one it gave out; an entry that lies
 * costs a look at one of its own rings.
 * A peer that writes bell or rung decides only whether it rings our bell
 * (a spurious wake-up of ours at worst: we take entries whenever we
 * wake); ours is armed again each time a poller of ours sleeps. */
/* A pool: connection memory for the connections between the two
 * processes of a link, so that a new connection between them costs no
 * memfd, no mmap and no descriptor passing, and a process with 100,000
 * connections maps hundreds of pools, not 100,000 memfds (each a mapping
 * of its own, against vm.max_map_count).  Slot k (a connection's header
 * and its two rings, laid out as above) starts at byte k * slot bytes;
 * every slot of a pool has the same ring size.  dsockd gives a freed slot
 * out again only when no process maps it (hdr.maps), after punching out
 * its pages (zeroed, their memory returned) and writing a fresh header. */
#define DSOCK_POOL_BYTES (64u << 20) /* a pool's size, at most (one slot at least) */
#define DSOCK_POOL_SLOTS_MAX 1024u

#define DSOCK_LINK_MAGIC   0x4b4c5344u /* "DSLK" */
#define DSOCK_LINK_VERSION 4
#define DSOCK_LINK_SLOTS   1024u
#define DSOCK_LINK_BYTES   (DSOCK_SHM_HDR + 2 * DSOCK_LINK_SLOTS * 4u)
#define DSOCK_LINK_LAP_SHIFT 20
#define DSOCK_LINK_SLOT_MASK ((1u << DSOCK_LINK_LAP_SHIFT) - 1)

/* The lap of queue position i: 1 to 4095, never 0 (memory as made), and
 * different for i and i - DSOCK_LINK_SLOTS. */
static inline uint32_t dsock_link_lap(uint64_t i)
{
	return (uint32_t)((i / DSOCK_LINK_SLOTS) % ((1u << (32 - DSOCK_LINK_LAP_SHIFT)) - 1)) + 1;
}

struct dsock_link_queue {
	uint64_t head;        /* consumer's line: entries ever taken (no tail:
			       * the entries carry their laps) */
	uint8_t pad1[DSOCK_CL - 8];
	uint64_t lease_until; /* consumer's lease line: a poller of the
			       * consumer looks at this queue before any of
			       * its threads sleeps, until this
			       * CLOCK_MONOTONIC ns (0: no lease) */
	uint32_t bell;        /* 1: the consumer's pollers sleep on its bell
			       * (RESULT of kind BELL): an entry pushed then
			       * rings it, unless rung is set already */
	uint8_t pad2[DSOCK_CL - 12];
	uint32_t rung;        /* set by the producer that rings, cleared by
			       * a poller of the consumer before it sleeps */
	uint8_t pad3[DSOCK_CL - 4];
} __attribute__((aligned(DSOCK_CL)));

struct dsock_link_hdr {
	uint32_t magic;
	uint32_t version;
	uint32_t slots;
	uint8_t pad[DSOCK_CL - 12];
	struct dsock_link_queue q[2];
};

_Static_assert(sizeof(struct dsock_link_hdr) <= DSOCK_SHM_HDR, "link header fits its page");
_Static_assert(DSOCK_LINK_SLOTS * 4u == DSOCK_SHM_HDR, "a queue's entries fill a page");

#endif

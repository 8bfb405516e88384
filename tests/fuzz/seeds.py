#!/usr/bin/env python3
"""Writes the hand-made seeds of the fuzz corpora (tests/fuzz/corpus/*/seed-*):
well-formed scripts that reach the deep states at once; the fuzzers mutate
from there.  The layouts follow src/common/proto.h and tests/fuzz/*.c."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC, VERSION = 0x4B435344, 1
HELLO, SOCK_EVENT, STAT_REQ, SHUTDOWN, OFFER, FETCH, PEER_REQ = 1, 2, 3, 6, 9, 11, 13
SHM, SOCKETPAIR, NETNS = 2, 3, 1  # enum dsock_path (transports), enum dsock_proof


def msg(mtype, payload=b"", seq=1):
    return struct.pack("<IHHII", MAGIC, VERSION, mtype, 16 + len(payload), seq) + payload


def hello(flags=0, ppid=0, comm=b"fuzz"):
    return msg(HELLO, struct.pack("<Ii32s16sQII", flags, ppid, comm, b"0.3", 0, 0, 0))


def addr(family=2, port=80, ip=b"\x00" * 10 + b"\xff\xff\x7f\x00\x00\x01"):
    return struct.pack("<HH16s", family, port, ip)


def sock_event(ev=2, fd=5, sid=1, state=5, path=1, reason=0):
    body = struct.pack("<IiQHHHHHH", ev, fd, sid, 2, 1, state, path, reason, 0)
    return msg(SOCK_EVENT, body + addr(port=40000) + addr(port=80) + b"\0" * 4)


def offer(sid=1, role=1, transport=SHM, proof=NETNS):
    return msg(OFFER, struct.pack("<QIHH", sid, role, transport, proof))


def fetch(sid=1, transport=SHM):
    return msg(FETCH, struct.pack("<QH6x", sid, transport))


def peer_req(sid=1):
    return msg(PEER_REQ, struct.pack("<Q", sid))


# proto records: ctl (bits 0-1 client, bit 2 fd, bits 3-4 fd kind, bit 5
# repair header, bit 6 root), length, bytes
def rec(data, slot=0, fd_kind=None, root=False):
    ctl = slot | (0x40 if root else 0)
    if fd_kind is not None:
        ctl |= 4 | (fd_kind << 3)
    return bytes([ctl, len(data)]) + data


MAIL, CONN, PEER, LISTEN = 2, 0, 1, 3
PROTO = {
    "hello": rec(hello(), fd_kind=MAIL),
    "hello-forked": rec(hello(), slot=0, fd_kind=MAIL) + rec(hello(flags=1, ppid=4242), slot=1, fd_kind=MAIL),
    "events": rec(hello(), fd_kind=MAIL) + rec(sock_event(ev=1, state=3)) + rec(sock_event())
    + rec(sock_event(ev=4)),
    "pair": rec(hello(), slot=0, fd_kind=MAIL) + rec(hello(), slot=1, fd_kind=MAIL)
    + rec(offer(1, 1), slot=0, fd_kind=PEER) + rec(offer(2, 2), slot=1, fd_kind=CONN),
    "offer-listener": rec(hello(), fd_kind=MAIL) + rec(offer(), fd_kind=LISTEN),
    # the test transport's provisioning: a socketpair per pair, fetched again
    "pair-socketpair": rec(hello(), slot=0, fd_kind=MAIL) + rec(hello(), slot=1, fd_kind=MAIL)
    + rec(offer(1, 1, SOCKETPAIR), slot=0, fd_kind=PEER) + rec(offer(2, 2, SOCKETPAIR), slot=1, fd_kind=CONN)
    + rec(fetch(1, SOCKETPAIR), slot=0, fd_kind=PEER) + rec(fetch(2, SHM), slot=1, fd_kind=CONN),
    # a hand-over's request for the peer's socket, after a pairing and on a
    # connection with no HELLO
    "peer-req": rec(hello(), slot=0, fd_kind=MAIL) + rec(hello(), slot=1, fd_kind=MAIL)
    + rec(offer(1, 1), slot=0, fd_kind=PEER) + rec(offer(2, 2), slot=1, fd_kind=CONN)
    + rec(peer_req(1), slot=0, fd_kind=PEER) + rec(peer_req(9), slot=2, fd_kind=CONN),
    # an exec's fetch of the pairing's resource, by each end and by a
    # socket of no pairing
    "fetch": rec(hello(), slot=0, fd_kind=MAIL) + rec(hello(), slot=1, fd_kind=MAIL)
    + rec(offer(1, 1), slot=0, fd_kind=PEER) + rec(offer(2, 2), slot=1, fd_kind=CONN)
    + rec(fetch(1), slot=0, fd_kind=PEER) + rec(fetch(2), slot=1, fd_kind=CONN)
    + rec(fetch(3), slot=0, fd_kind=LISTEN),
    "stat": rec(hello(), slot=0, fd_kind=MAIL) + rec(sock_event(), slot=0) + rec(msg(STAT_REQ), slot=1)
    + rec(msg(STAT_REQ), slot=2, root=True),
    "shutdown": rec(msg(SHUTDOWN), slot=3) + rec(msg(SHUTDOWN), slot=2, root=True),
    "garbage": rec(b"\x00" * 7) + rec(msg(99)) + rec(hello()[:20]),
}

# ring scripts: options byte, then opcode + arguments (tests/fuzz/fuzz_ring.c)
(PRODUCE, CONSUME, RECV, SEND, LOOK, S32, S64, SDATA, KSEND, SWITCH, PSHUT, VSHUT, PRST,
 PDOWN, PASK, PREAD) = range(16)


def produce(n, token=1):
    return bytes([PRODUCE]) + struct.pack("<HB", n, token)


def consume(n):
    return bytes([CONSUME]) + struct.pack("<H", n)


def recv(n, how=0):
    return bytes([RECV]) + struct.pack("<HB", n, how)


def send(n, vec=0):
    return bytes([SEND]) + struct.pack("<HB", n, vec)


def look(sleep=0):
    return bytes([LOOK, sleep])


def peer_read(n):
    return bytes([PREAD]) + struct.pack("<H", n)


def scribble64(off, val):
    return bytes([S64]) + struct.pack("<HQ", off, val)


RING = {
    "pingpong": bytes([2]) + (send(14) + consume(14) + produce(14) + recv(14)) * 4,
    "stream": bytes([2]) + produce(4000) + recv(1000, 2) + recv(3000) + produce(4096) + look()
    + recv(9000, 1) + recv(9000),
    "backpressure": bytes([2]) + send(9000) + send(100) + look() + consume(4096) + look(1) + send(100),
    "switch": bytes([0]) + bytes([KSEND, 20]) + recv(5) + bytes([SWITCH]) + produce(100) + recv(200)
    + recv(200),
    "switch-tx": bytes([0]) + send(10) + consume(10) + send(20) + consume(20),
    "linger": bytes([6]) + produce(10) + recv(10) + produce(10) + look(1) + recv(10),
    "eof": bytes([2]) + produce(50) + bytes([PSHUT]) + recv(20) + recv(100) + recv(100),
    "reset": bytes([2]) + produce(50) + bytes([PRST]) + recv(10) + send(10),
    "shutdown": bytes([2]) + send(10) + bytes([VSHUT, 1]) + send(10) + recv(10),
    "scribble-tail": bytes([2]) + produce(10) + scribble64(448, 1 << 40) + recv(10),  # 448: ring 1 (to side 0), tail
    "side1": bytes([3]) + send(100) + consume(100) + produce(100) + recv(100),
    # hand-over (back.c): the peer goes back to the kernel with unread ring
    # bytes; the peer asks the victim to, with unread bytes of the victim's
    "peer-down": bytes([2]) + produce(3000) + recv(1000) + bytes([PDOWN]) + produce(500) + look()
    + recv(5000) + recv(5000),
    "victim-down": bytes([2]) + send(3000) + consume(1000) + bytes([PASK]) + send(500) + look()
    + peer_read(4000) + peer_read(4000),
    "both-down": bytes([0]) + bytes([KSEND, 20]) + send(100) + produce(200) + bytes([PASK]) + recv(10)
    + bytes([PDOWN]) + recv(400) + peer_read(400) + send(50) + peer_read(400),
}


def main():
    for name, seeds in (("proto", PROTO), ("ring", RING)):
        d = os.path.join(HERE, "corpus", name)
        os.makedirs(d, exist_ok=True)
        for k, v in seeds.items():
            with open(os.path.join(d, "seed-" + k), "wb") as f:
                f.write(v)
    print("seeds written under", os.path.join(HERE, "corpus"), file=sys.stderr)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Sleepers while another thread of the process polls busily (its epoll
loop holds link leases: a producer announces there instead of sending a
token).  The main thread warms each connection with blocking receives (a
receiver asleep in recv), then, per round, a thread asleep in epoll_wait
on a set of a pipe alone (from the third round on, of the listener and a
pipe, as memcached's acceptor) is given the round's connection by the
main thread (epoll_ctl ADD), and the peer writes on it.  Every sleeper
wakes (natively it does): a sleeper counts itself and ends the leases
before its last look, and no lease is published while one sleeps, or an
entry taken by the poller wakes nobody; a sleeper on a set of nothing a
transport may carry sleeps light (leaving the leases on), and the ADD
promotes it first (src/lib/sock/light.h).
With "before", the peer writes first and the connection joins the set
0.2 s later, its bytes already there (announced on the link to the busy
poller: no token stands for them): the kernel would wake the sleeper at
the ADD, and so must we (a poke: src/lib/sock/poke.h).
Usage: sleeper_given_conn.py ROUNDS [before]; prints "woke N" (rounds in
which the sleeper saw the connection readable within 5 s)."""
import os, select, socket, sys, threading, time

rounds = int(sys.argv[1])
before = len(sys.argv) > 2 and sys.argv[2] == "before"
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(64)
port = l.getsockname()[1]
ctl_r, ctl_w = os.pipe()
child = os.fork()
if child == 0:
    # the peer: one busy ping-pong connection, and one per round that it
    # writes on when told
    os.close(ctl_w)
    busy = socket.create_connection(("127.0.0.1", port))
    conns = [socket.create_connection(("127.0.0.1", port)) for _ in range(rounds)]
    stop = []

    def pingpong():
        while not stop:
            busy.sendall(b"p")
            if busy.recv(1) != b"p":
                return
    threading.Thread(target=pingpong, daemon=True).start()
    for c in conns:  # warm-up: each moves to the rings at its first calls
        for _ in range(8):
            if c.recv(1, socket.MSG_WAITALL) != b"w":
                os._exit(1)
            c.sendall(b"w")
    while True:
        b = os.read(ctl_r, 1)
        if not b:
            break
        conns[b[0]].sendall(b"data")
    stop.append(1)
    os._exit(0)
os.close(ctl_r)
busy = l.accept()[0]
conns = [l.accept()[0] for _ in range(rounds)]


def serve_busy():
    ep = select.epoll()
    ep.register(busy.fileno(), select.EPOLLIN)
    try:
        while True:
            if ep.poll(0.1):
                b = busy.recv(1)
                if not b:
                    return
                busy.sendall(b)
    except OSError:
        return  # the peer left with a ping unread: a reset
threading.Thread(target=serve_busy, daemon=True).start()
for c in conns:
    for _ in range(8):
        c.sendall(b"w")
        if c.recv(1, socket.MSG_WAITALL) != b"w":
            sys.exit("warm-up")
pr, pw = os.pipe()
ep = select.epoll()
ep.register(pr, select.EPOLLIN)
woke = 0
for k, c in enumerate(conns):
    if k == 2:
        ep.register(l.fileno(), select.EPOLLIN)
    got = []
    t = threading.Thread(target=lambda: got.append(ep.poll(5.0)))
    t.start()
    time.sleep(0.2)  # asleep by now, on the pipe alone
    if before:
        os.write(ctl_w, bytes([k]))
        time.sleep(0.2)  # the bytes are here
    ep.register(c.fileno(), select.EPOLLIN)
    if not before:
        os.write(ctl_w, bytes([k]))
    t.join()
    if got and any(fd == c.fileno() for fd, _ in got[0]) and c.recv(4, socket.MSG_WAITALL) == b"data":
        woke += 1
    ep.unregister(c.fileno())
print("woke", woke, flush=True)
os.close(ctl_w)  # the peer leaves; the busy loop sees its EOF
os.waitpid(child, 0)

#!/usr/bin/env python3
"""Both ends of a TCP connection in one Python process, one end handed to a
program without dsock while this process waits for it
(tests/faults/test_handover.py runs it, natively and under dsock):

  handover_same.py run|spawn HELPER

A (from connect) and B (from accept) ping-pong until both directions are
on the rings; A sends X bytes B never reads, B sends Y bytes A has not
read; then B goes to `HELPER child FD` (tests/faults/handover.c, the static
build) through subprocess.run(pass_fds=[B]) (close_fds left at its
default) or os.posix_spawn with B made inheritable, and this process waits
for the child.  The child must read exactly X and send Z2; then this
process closes B, and A must read exactly Y, Z2 and EOF.  It prints
"parent ok" or why not (the child prints its own line) and the time
stamps "t handover", "t child-exited" (CLOCK_MONOTONIC, as handover.c)."""
import os, socket, subprocess, sys, time

X, Y, Z2, ROUNDS = 100000, 60000, 10000, 200
SA, SB, SC = 0, 1, 2


def pat(n, s):
    return bytes((i * 7 + s * 13 + (i >> 8)) & 255 for i in range(n))


def stamp(label):
    print(f"t {label} {time.monotonic():.6f}", flush=True)


def fail(what):
    print(f"parent FAIL: {what}", flush=True)
    sys.exit(1)


def recv_exact(sock, n, what):
    data = b""
    while len(data) < n:
        try:
            got = sock.recv(n - len(data))
        except OSError as e:
            return data, e.strerror
        if not got:
            return data, "EOF"
        data += got
    return data, None


def recv_stream(sock, s, n):
    want = pat(n, s)
    data, err = recv_exact(sock, n, f"stream {s}")
    for i, (a, b) in enumerate(zip(data, want)):
        if a != b:
            fail(f"stream {s} byte {i} is {a}, not {b}")
    if err:
        fail(f"stream {s} ends at {len(data)} of {n} ({err})")


def main():
    how, helper = sys.argv[1], sys.argv[2]
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    a = socket.create_connection(lst.getsockname())
    b, _ = lst.accept()
    lst.close()
    for i in range(ROUNDS):
        n = 1 + i % 100
        if i == 2:
            time.sleep(0.05)  # the pairing lands (see handover.c's client)
        msg = bytes([i & 255]) * n
        a.sendall(msg)
        if recv_exact(b, n, "ping")[0] != msg:
            fail("ping")
        b.sendall(msg)
        if recv_exact(a, n, "pong")[0] != msg:
            fail("pong")
    a.sendall(pat(X, SA))  # X: B never reads it
    b.sendall(pat(Y, SB))  # Y: A has not read it yet
    argv = [helper, "child", str(b.fileno())]
    stamp("handover")
    if how == "run":
        st = subprocess.run(argv, pass_fds=[b.fileno()]).returncode
    elif how == "spawn":
        os.set_inheritable(b.fileno(), True)
        pid = os.posix_spawn(helper, argv, os.environ)
        st = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    else:
        fail("usage: handover_same.py run|spawn HELPER")
    stamp("child-exited")
    b.close()
    recv_stream(a, SB, Y)
    recv_stream(a, SC, Z2)
    data, err = recv_exact(a, 1, "EOF")
    if data or err != "EOF":
        fail(f"no EOF after the child's last byte ({data!r}, {err})")
    print("parent ok" if st == 0 else f"parent FAIL: the child exited {st}", flush=True)
    a.close()


main()

"""Small exchanges across hosts (run_hosts.sh).
  serve ADDR PORT            echo every connection's lines, each on a thread, until killed
  dial ADDR PORT N HOLD [REST]  N round trips of 100 bytes, HOLD seconds idle, N more,
                             then REST seconds idle before it closes;
                             prints "exact" if every reply was its request
  steady ADDR PORT SECS      a round trip of 100 bytes every 0.1 s for SECS seconds;
                             prints "exact" (or "differs"), the count and the
                             longest round trip in seconds
"""
import socket
import sys
import threading
import time


def echo(c):
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                return
            c.sendall(d)


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        k = s.recv(n - len(b))
        if not k:
            break
        b += k
    return b


if sys.argv[1] == "serve":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((sys.argv[2], int(sys.argv[3])))
    l.listen(64)
    while True:
        c, _ = l.accept()
        threading.Thread(target=echo, args=(c,), daemon=True).start()
elif sys.argv[1] == "steady":
    c = socket.create_connection((sys.argv[2], int(sys.argv[3])))
    end, good, n, worst = time.time() + float(sys.argv[4]), True, 0, 0.0
    while time.time() < end:
        m = (b"%06d" % n) * 16 + b"abcd"
        t0 = time.time()
        c.sendall(m)
        good = good and recv_exact(c, len(m)) == m
        worst = max(worst, time.time() - t0)
        n += 1
        time.sleep(0.1)
    print("exact" if good else "differs", n, "%.2f" % worst, flush=True)
else:
    c = socket.create_connection((sys.argv[2], int(sys.argv[3])))
    n, hold, good = int(sys.argv[4]), float(sys.argv[5]), True
    rest = float(sys.argv[6]) if len(sys.argv) > 6 else 0
    for r in range(2 * n):
        if r == n:
            time.sleep(hold)
        m = (b"%06d" % r) * 16 + b"abcd"
        c.sendall(m)
        good = good and recv_exact(c, len(m)) == m
    print("exact" if good else "differs", flush=True)
    time.sleep(rest)

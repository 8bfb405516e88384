"""A peer killed with SIGKILL while holding unread data resets the
connection (the kernel's close of a socket with unread data sends an RST);
one that read everything ends it with a FIN.  Rounds of: fork a peer that
accepts, echoes a warm-up, then reads all (mode eof) or stops reading with
bytes unread (mode reset); kill it while we are blocked in recv (blocked)
or before we recv (after).  Prints a line per outcome and its count."""
import errno, os, signal, socket, sys, threading, time

rounds, mode, when = int(sys.argv[1]), sys.argv[2], sys.argv[3]
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(8)
port = l.getsockname()[1]
seen = {}
for r in range(rounds):
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rd)
        a, _ = l.accept()
        for i in range(60):
            m = a.recv(8)
            a.sendall(m)
        if mode == "eof":
            n = 0
            while n < 5000:
                n += len(a.recv(65536))
        os.write(wr, b"x")
        time.sleep(60)
        os._exit(0)
    os.close(wr)
    c = socket.create_connection(("127.0.0.1", port))
    for i in range(60):
        if i == 20:
            time.sleep(0.02)  # (under dsock: both ends pair meanwhile)
        c.sendall(b"%08d" % i)
        got = b""
        while len(got) < 8:
            got += c.recv(8 - len(got))
    c.sendall(b"u" * 5000)
    os.read(rd, 1)
    os.close(rd)
    if when == "blocked":
        threading.Timer(0.05, os.kill, (pid, signal.SIGKILL)).start()
    else:
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    try:
        b = c.recv(100)
        out = "eof" if not b else "data"
    except OSError as e:
        out = errno.errorcode.get(e.errno, str(e.errno))
    os.waitpid(pid, 0)
    c.close()
    seen[out] = seen.get(out, 0) + 1
for k in sorted(seen):
    print(k, seen[k])

#!/usr/bin/env python3
"""Faults on the fast path, end to end, with real processes under dsock:

  1. SIGKILL of the receiver in the middle of a transfer: the sender gets
     EPIPE or ECONNRESET promptly (a blocking sender, and a nonblocking one
     waiting in poll);
  2. SIGKILL of the sender: the receiver gets EOF or ECONNRESET promptly;
  3. dsockd killed under an established fast-path connection: it keeps
     working; a new connection falls back to the kernel (no-daemon); once a
     daemon is back, the next new connection is upgraded again;
  4. a hostile peer scribbles over the ring indices of one connection: the
     victim gets ECONNRESET on that one, logs it, does not crash, and its
     other connection to the same peer keeps working; a peer that never
     returns window cannot hang a sender that has SO_SNDTIMEO;
  5. client and server in different network namespaces (root only): the
     connection works and stays on the kernel;
  6. another user (root only: created with useradd) reaches a root daemon
     but sees none of root's processes, cannot stop it, and cannot open the
     memory of root's connections;
  7. a peer killed with SIGKILL while bytes of ours lie unread (the kernel
     resets: ECONNRESET), or after reading every one (a FIN: EOF), with
     the survivor blocked in recv or reading afterwards: 20 rounds each,
     the same outcome natively and under dsock every time
     (tests/faults/killpeer.py);
  8. a hostile peer scribbles over the queues of the link it shares with an
     epoll server that takes its announcements: the server logs it, does
     not crash, and its connections to that peer keep working (by tokens).
  9. sleepers while another thread serves a busy connection (its epoll
     loop holds link leases): receivers asleep in recv, and a thread asleep
     in epoll_wait on a pipe (then a listener and a pipe: a light sleeper)
     that is given a connection by another thread; the peer's bytes wake
     each of them, natively and under dsock, every round
     (tests/faults/sleeper_given_conn.py).
 10. the same sleeper on a set of nothing a transport may carry, given a
     connection whose bytes are already there (announced to the busy
     poller, no token behind them): natively the ADD wakes it, and under
     dsock too (a poke), every round.
 11. a pairing refused because the process forked while it was pending
     (its memory mapped, then refused at the attach), closed later in a
     second fork child and in the process: every count of the slot comes
     off, and the daemon frees it (no slot waits).
 12. a fork child that ends with _exit holding pooled connections (its
     counts in their slots stay), and a program started by posix_spawn
     that adopted one and does the same: the pools are retired, and go
     once their connections close; none of their slots waits.

Each check prints ok/FAIL; exit 0 on pass; last line 'faults: N passed, N failed'."""
import os, shutil, signal, subprocess, sys, tempfile, time

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
DSOCK = os.path.join(BUILD, "bin", "dsock")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
tmp = tempfile.mkdtemp(prefix="dsock-faults-")
SOCK = os.path.join(tmp, "d.sock")
ENV = dict(os.environ, DSOCK_SOCKET=SOCK, DSOCK_FASTPATH="1", PYTHONUNBUFFERED="1")
results = []
procs = []


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else "  " + str(detail)[-600:]), flush=True)


def under_dsock(code, *args, env=None, prefix=()):
    p = subprocess.Popen([*prefix, DSOCK, "run", "--", PY, "-c", code, *map(str, args)], env=env or ENV,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def line(p, secs=10):
    """The next stdout line of p, or '' after secs."""
    import select
    end = time.time() + secs
    while time.time() < end:
        r, _, _ = select.select([p.stdout], [], [], max(0.0, end - time.time()))
        if r:
            return p.stdout.readline().strip()
    return ""


def stat():
    r = subprocess.run([DSOCK, "stat", "--raw"], env=ENV, capture_output=True, text=True, timeout=20)
    return r.stdout


def stat_n(name):
    """The daemon's counter NAME from `dsock stat` (-1: not there)."""
    for w in stat().split():
        if w.startswith(name + "="):
            return int(w.split("=")[1])
    return -1


def paths_of(pid):
    return [l for l in stat().splitlines() if l.startswith("sock pid=%d " % pid) and "state=connected" in l]


def on_shm(pid, n=1, secs=5):
    end = time.time() + secs
    while time.time() < end:
        if sum("path=shm" in l for l in paths_of(pid)) >= n:
            return True
        time.sleep(0.05)
    return False


def daemon_pid():
    try:
        return int(open(SOCK + ".lock").read().split()[0])
    except (OSError, ValueError):
        return 0


def say(p, cmd):
    p.stdin.write(cmd + "\n"); p.stdin.flush()


def more_conn(srv, cli, i, echo=True):
    """The client makes connection i; the server accepts it (and echoes on it)."""
    say(cli, "connect"); line(cli); line(srv)
    if echo:
        say(srv, "echo %d" % i); line(srv)


def echo_pair(server=None, client=None, srv_prefix=(), cli_prefix=(), warm=True):
    """SERVER and CLIENT under dsock, connection 0 echoing; warm: round trips
    until both ends are on the rings (offers go at the fourth I/O)."""
    srv = under_dsock(server or SERVER, prefix=srv_prefix)
    port = int(line(srv))
    cli = under_dsock(client or CLIENT, port, prefix=cli_prefix)
    more_conn(srv, cli, 0)
    if warm:
        say(cli, "pingpong 0 50"); line(cli)
        # a pairing completes at the calls after its results came: the
        # first between two new processes (their link and pool made) may
        # come after these round trips, so a few more until both ends are on
        for _ in range(20):
            if on_shm(cli.pid, 1, 0.2) and on_shm(srv.pid, 1, 0.1):
                break
            say(cli, "pingpong 0 10"); line(cli)
    return srv, cli, port


# A server: accepts connections and, per line on stdin, acts on one of them.
SERVER = r'''
import socket, sys, os, threading, time, mmap
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(16)
print(l.getsockname()[1], flush=True)
conns = []
def acceptor():
    while True:
        a, _ = l.accept(); conns.append(a); print("accepted", len(conns), flush=True)
threading.Thread(target=acceptor, daemon=True).start()
def echo(a):
    while True:
        b = a.recv(65536)
        if not b: return
        a.sendall(b)
for cmd in sys.stdin:
    cmd = cmd.split()
    if cmd[0] == "sink":            # read and discard, forever
        a = conns[int(cmd[1])]
        threading.Thread(target=lambda: [None for _ in iter(lambda: a.recv(65536), b"")], daemon=True).start()
    elif cmd[0] == "echo":
        threading.Thread(target=echo, args=(conns[int(cmd[1])],), daemon=True).start()
    elif cmd[0] == "scribble":      # a hostile peer: garbage into the ring indices
        # its own mapping of the connection memory (the library closed the
        # memfd once mapped; the first slot of its pool is the connection),
        # written through /proc/self/mem
        maps = [l.split()[0].split("-") for l in open("/proc/self/maps") if "dsock-conn" in l or "dsock-pool" in l]
        fds = [int(a, 16) for a, _ in maps]
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            for base in fds[:1]:
                for ring in (192, 448):     # tail and head of both rings
                    mem.seek(base + ring)
                    mem.write((0xFFFFFFFF00000000 + ring).to_bytes(8, "little"))
                    mem.seek(base + ring + 64)
                    mem.write((0x7FFFFFFF00000000).to_bytes(8, "little"))
        print("scribbled", len(fds), flush=True)
    print("done", flush=True)
'''

# An epoll echo server over every connection it accepts (its spinning
# epoll_wait takes leases on its links).
LINK_VICTIM = r'''
import socket, select
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(16)
print(l.getsockname()[1], flush=True)
ep = select.epoll(); ep.register(l, select.EPOLLIN); conns = {}
while True:
    for fd, ev in ep.poll(1):
        if fd == l.fileno():
            a, _ = l.accept(); conns[a.fileno()] = a; ep.register(a, select.EPOLLIN)
            continue
        b = conns[fd].recv(65536)
        if not b:
            ep.unregister(fd); conns.pop(fd).close()
        else:
            conns[fd].sendall(b)
'''

# Three connections to LINK_VICTIM, round trips round-robin; at "scribble"
# it writes garbage over the entries of both queues of its link mapping
# (laps that no position has: shm_layout.h).
LINK_HOSTILE = r'''
import socket, sys, time
cs = [socket.create_connection(("127.0.0.1", int(sys.argv[1]))) for _ in range(3)]
for c in cs:
    c.settimeout(5)
def rounds(n):
    for i in range(n):
        c = cs[i % 3]; c.sendall(b"ping"); got = b""
        while len(got) < 4:
            b = c.recv(4 - len(got))
            if not b: raise EOFError
            got += b
rounds(600)
print("warm", flush=True)
sys.stdin.readline()
maps = [l.split()[0].split("-")[0] for l in open("/proc/self/maps") if "dsock-link" in l]
mem = open("/proc/self/mem", "r+b", buffering=0)
def scribble():
    for a in maps:
        mem.seek(int(a, 16) + 4096); mem.write(b"\xff" * 8192)  # (the header page, then each queue's entries)
scribble()
print("scribbled", len(maps), flush=True)
try:
    # (again every 10 round trips for a while: an honest push writes its
    # entry anew, and a server asleep takes the queue only when woken)
    t0 = time.time()
    for k in range(50):
        rounds(10); scribble()
    rounds(2500); print("pingpong ok %.2f" % (time.time() - t0), flush=True)
except Exception as e:
    print("pingpong failed", repr(e), flush=True)
sys.stdin.readline()
'''

# A client: connects n times, and acts per line on stdin.
CLIENT = r'''
import socket, sys, time, errno, os
port = int(sys.argv[1])
cs = []
for cmd in sys.stdin:
    cmd = cmd.split()
    try:
        if cmd[0] == "connect":
            cs.append(socket.create_connection(("127.0.0.1", port)))
            print("connected", len(cs) - 1, flush=True); continue
        c = cs[int(cmd[1])]
        if cmd[0] == "flood":         # send until the connection fails
            t0 = None; buf = b"x" * 65536
            print("flooding", flush=True)
            while True:
                c.sendall(buf)
        elif cmd[0] == "nbflood":     # the same, nonblocking, waiting in poll for POLLOUT
            import select
            c.setblocking(False); p = select.poll(); p.register(c, select.POLLOUT)
            buf = b"x" * 65536
            print("flooding", flush=True)
            while True:
                p.poll(100)
                try:
                    c.send(buf)
                except BlockingIOError:
                    pass
        elif cmd[0] == "pingpong":    # n echo round trips, checked
            for i in range(int(cmd[2])):
                m = b"%08d" % i; c.sendall(m); got = b""
                while len(got) < len(m):
                    got += c.recv(len(m) - len(got))
                assert got == m, (got, m)
            print("pingpong ok", flush=True)
        elif cmd[0] == "recvnb":      # one nonblocking read
            c.setblocking(False); print("recv", c.recv(100), flush=True)
        elif cmd[0] == "sendtimeo":   # the peer never reads: a bounded send
            c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, b"\x00\x00\x00\x00\x00\x00\x00\x00\x20\xa1\x07\x00\x00\x00\x00\x00")
            t0 = time.time(); sent = 0
            try:
                while time.time() - t0 < 10:
                    sent += c.send(b"y" * 65536)
            except OSError as e:
                print("sendtimeo", errno.errorcode.get(e.errno), round(time.time() - t0, 2), sent, flush=True)
                continue
            print("sendtimeo none", round(time.time() - t0, 2), flush=True)
    except (OSError, AssertionError) as e:
        print("error", errno.errorcode.get(getattr(e, "errno", 0), repr(e)), time.monotonic(), flush=True)
'''

SINK = r'''
import socket, sys, time
port = int(sys.argv[1])
c = socket.create_connection(("127.0.0.1", port))
print("connected", flush=True)
n = 0
while True:
    b = c.recv(65536)
    if not b: break
    n += len(b)
print("eof", time.monotonic(), n, flush=True)
'''

try:
    # ---- 1. SIGKILL the receiver in the middle of a transfer -------------------
    srv, cli, port = echo_pair()
    check("1. connection on the fast path", on_shm(cli.pid), paths_of(cli.pid))
    # the client floods and never reads: the echo stalls, so the client ends
    # up blocked in send when the server dies
    say(cli, "flood 0"); line(cli)
    time.sleep(0.3)
    os.kill(srv.pid, signal.SIGKILL)  # `dsock run` execs the program: same pid
    t_kill = time.monotonic()
    out = line(cli, 10).split()
    check("1. SIGKILL of the receiver: the sender gets EPIPE/ECONNRESET",
          out[:1] == ["error"] and out[1] in ("EPIPE", "ECONNRESET"), out)
    if out[:1] == ["error"]:
        check("1. ... within 2 s", float(out[2]) - t_kill < 2.0, float(out[2]) - t_kill)
    cli.kill()

    # the same with a nonblocking sender waiting in poll: the dead receiver
    # never said so in the ring (SIGKILL), only the kernel socket does
    srv, cli, port = echo_pair()
    check("1. (poll) connection on the fast path", on_shm(cli.pid), paths_of(cli.pid))
    say(cli, "nbflood 0"); line(cli)
    time.sleep(0.3)
    os.kill(srv.pid, signal.SIGKILL)
    t_kill = time.monotonic()
    out = line(cli, 10).split()
    check("1. (poll) SIGKILL of the receiver: a nonblocking sender in poll gets EPIPE/ECONNRESET within 2 s",
          out[:1] == ["error"] and out[1] in ("EPIPE", "ECONNRESET") and float(out[2]) - t_kill < 2.0,
          out + [t_kill])
    cli.kill()

    # ---- 2. SIGKILL the sender -------------------------------------------------
    flood = r'''
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(); print(l.getsockname()[1], flush=True)
a, _ = l.accept(); print("accepted", flush=True)
while True: a.sendall(b"z" * 65536)
'''
    snd = under_dsock(flood)
    port2 = int(line(snd))
    sink2 = under_dsock(SINK, port2)
    line(sink2); line(snd)
    check("2. connection on the fast path", on_shm(sink2.pid), paths_of(sink2.pid))
    time.sleep(0.3)
    # natively the sender's receive queue is empty, so its death sends a
    # FIN; a wake-up byte left there (a space token a blocked sender never
    # reads) would make it an RST, and the receiver would see ECONNRESET
    q = subprocess.run(["ss", "-tnH", f"sport = :{port2}"], capture_output=True, text=True).stdout.split()
    check("2. the blocked sender's socket holds no wake-up bytes", q[1:2] == ["0"], q)
    os.kill(snd.pid, signal.SIGKILL)
    t_kill = time.monotonic()
    out = line(sink2, 10).split()
    check("2. SIGKILL of the sender: the receiver gets EOF", out[:1] == ["eof"], out + [sink2.stderr.read(300) if sink2.poll() is not None else ""])
    if out[:1] == ["eof"]:
        check("2. ... within 2 s, after %s bytes" % out[2], float(out[1]) - t_kill < 2.0, float(out[1]) - t_kill)
    sink2.kill()

    # ---- 3. dsockd killed and restarted under load ----------------------------
    srv, cli, port = echo_pair()
    check("3. connection on the fast path", on_shm(cli.pid), paths_of(cli.pid))
    dpid = daemon_pid()
    os.kill(dpid, signal.SIGKILL)
    time.sleep(0.2)
    say(cli, "pingpong 0 2000")
    check("3. established connection works with dsockd dead (2000 round trips)", line(cli) == "pingpong ok")
    more_conn(srv, cli, 1)
    say(cli, "pingpong 1 200")
    check("3. new connection with no daemon works (kernel)", line(cli) == "pingpong ok")
    subprocess.run([DSOCK, "run", "--", "true"], env=ENV, timeout=30)  # starts a daemon
    check("3. a new daemon is up", daemon_pid() not in (0, dpid), daemon_pid())
    more_conn(srv, cli, 2)
    say(cli, "pingpong 2 200"); line(cli)
    ok = on_shm(cli.pid, 1, 5)
    rows = paths_of(cli.pid)
    check("3. after the restart a new connection is upgraded again", ok, rows)
    say(cli, "pingpong 0 500")
    check("3. the first connection still works", line(cli) == "pingpong ok")
    for p in (srv, cli):
        p.kill()

    # ---- 4. a hostile peer ------------------------------------------------------
    srv, cli, port = echo_pair()
    check("4. victim connection on the fast path", on_shm(cli.pid), paths_of(cli.pid))
    say(srv, "scribble")
    out = line(srv); line(srv)
    check("4. the hostile peer found and scribbled one connection's memory", out == "scribbled 1", out)
    more_conn(srv, cli, 1)
    say(cli, "recvnb 0")
    out = line(cli).split()
    check("4. the victim's read on the scribbled connection is ECONNRESET", out[:2] == ["error", "ECONNRESET"], out)
    say(cli, "pingpong 1 1000")
    check("4. the victim's other connection keeps working", line(cli) == "pingpong ok")
    check("4. the victim is alive", cli.poll() is None)
    more_conn(srv, cli, 2, echo=False)
    on_shm(cli.pid, 2)
    say(cli, "sendtimeo 2")
    out = line(cli, 15).split()
    check("4. a peer that never returns window: SO_SNDTIMEO ends the send (EAGAIN)",
          out[:2] == ["sendtimeo", "EAGAIN"] and float(out[2]) < 3, out)
    cli.stdin.close()
    cli.wait(timeout=10)
    err = cli.stderr.read()
    check("4. the reset is logged for the operator", "shared memory" in err and "reset" in err, err)
    srv.kill()

    # ---- 6. another user ---------------------------------------------------------
    if os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("runuser"):
        print("skip 6. another user (needs root, useradd and runuser)")
    else:
        user = "dsockiso"
        subprocess.run(["useradd", "-M", "-r", "-s", "/usr/sbin/nologin", user], capture_output=True)
        os.chmod(tmp, 0o755)  # the daemon's own checks are under test, not the directory's
        cli_copy = os.path.join(tmp, "dsock-cli")
        shutil.copy(DSOCK, cli_copy); os.chmod(cli_copy, 0o755)
        srv, cli, port = echo_pair()
        check("6. root's connection on the fast path", on_shm(cli.pid), paths_of(cli.pid))
        as_user = lambda *a: subprocess.run(["runuser", "-u", user, "--", "env", "DSOCK_SOCKET=" + SOCK, *a],
                                            capture_output=True, text=True, timeout=20)
        r = as_user(cli_copy, "stat", "--raw")
        check("6. another user reaches the daemon", r.returncode == 0 and r.stdout.startswith("daemon "), r.stderr)
        check("6. ... and sees none of root's processes or sockets",
              "pid=%d " % cli.pid not in r.stdout and "pid=%d " % srv.pid not in r.stdout and "sock " not in r.stdout,
              r.stdout)
        r = as_user(cli_copy, "stop")
        check("6. another user may not stop root's daemon", r.returncode != 0 and daemon_pid() and
              os.path.exists("/proc/%d" % daemon_pid()), r.stdout + r.stderr)
        # the memory as a file: the endpoint's mapping (map_files) and the
        # daemon's copy of the memfd (fd), each by path
        memfds = ["/proc/%d/map_files/%s" % (cli.pid, l.split()[0]) for l in open("/proc/%d/maps" % cli.pid)
                  if "dsock-conn" in l or "dsock-pool" in l]
        memfds += ["/proc/%d/fd/%s" % (daemon_pid(), f) for f in os.listdir("/proc/%d/fd" % daemon_pid())
                   if any(k in os.readlink("/proc/%d/fd/%s" % (daemon_pid(), f)) for k in ("dsock-conn", "dsock-pool"))]
        r = as_user(PY, "-c", "import sys\nfor f in sys.argv[1:]:\n    try: open(f, 'rb'); print('opened', f)\n"
                    "    except OSError as e: print('denied', e.errno)",
                    *memfds)
        check("6. another user cannot open root's connection memory (%d paths tried)" % len(memfds),
              memfds and "opened" not in r.stdout and r.stdout.count("denied") == len(memfds), r.stdout + r.stderr)
        say(cli, "pingpong 0 100")
        check("6. root's connection still works", line(cli) == "pingpong ok")
        for p in (srv, cli):
            p.kill()

    # ---- 5. different network namespaces ---------------------------------------
    if os.geteuid() != 0 or not shutil.which("ip"):
        print("skip 5. network namespaces (needs root and ip)")
    else:
        ns = ["dsockF1", "dsockF2"]
        sh = lambda c: subprocess.run(c, shell=True, capture_output=True, text=True)
        sh("ip netns del dsockF1; ip netns del dsockF2")
        r = sh("ip netns add dsockF1 && ip netns add dsockF2 && "
               "ip link add dsf1 type veth peer name dsf2 && ip link set dsf1 netns dsockF1 && ip link set dsf2 netns dsockF2 && "
               "ip -n dsockF1 addr add 10.199.0.1/24 dev dsf1 && ip -n dsockF2 addr add 10.199.0.2/24 dev dsf2 && "
               "ip -n dsockF1 link set dsf1 up && ip -n dsockF2 link set dsf2 up && "
               "ip -n dsockF1 link set lo up && ip -n dsockF2 link set lo up")
        if r.returncode != 0:
            print("skip 5. network namespaces: " + r.stderr.strip())
        else:
            srv, cli, port = echo_pair(SERVER.replace('"127.0.0.1", 0', '"10.199.0.1", 0'),
                                       CLIENT.replace('"127.0.0.1", port', '"10.199.0.1", port'),
                                       ("ip", "netns", "exec", "dsockF1"), ("ip", "netns", "exec", "dsockF2"),
                                       warm=False)
            say(cli, "pingpong 0 300")
            out = line(cli)
            check("5. across namespaces the connection works", out == "pingpong ok", out + (cli.stderr.read(500) if cli.poll() is not None else ""))
            time.sleep(0.5)
            rows = [l for l in stat().splitlines() if "10.199.0.1:%d" % port in l and "state=connected" in l]
            check("5. ... and stays on the kernel, with a reason", rows and all("path=kernel" in l and "reason=-" not in l for l in rows), rows)
            for p in (srv, cli):
                p.kill()
        sh("ip netns del dsockF1; ip netns del dsockF2")
    # ---- 7. a peer killed with unread data, or with none ----------------------
    kp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "killpeer.py")
    for mode in ("reset", "eof"):
        for when in ("blocked", "after"):
            args = [PY, kp, "20", mode, when]
            nat = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout.split()
            rep = os.path.join(tmp, "kp.report")
            env = dict(ENV, DSOCK_FASTPATH_REPORT=rep)
            ds = subprocess.run([DSOCK, "run", "--", *args], env=env, capture_output=True, text=True, timeout=120)
            try:
                rings = sum(int(l.split()[1]) for l in open(rep))
                os.unlink(rep)
            except OSError:
                rings = 0
            want = ["ECONNRESET" if mode == "reset" else "eof", "20"]
            check("7. peer killed (%s, survivor %s): natively %s" % (mode, when, " ".join(want)), nat == want, nat)
            check("7. ... and under dsock, all 20 on the rings" , ds.stdout.split() == want and rings >= 20,
                  (ds.stdout, ds.stderr[-300:], rings))

    # ---- 8. a hostile peer and the link ----------------------------------------
    srv = under_dsock(LINK_VICTIM, env=dict(ENV, DSOCK_LOG="debug"))
    port = int(line(srv))
    cli = under_dsock(LINK_HOSTILE, port)
    out = line(cli, 20)
    check("8. the peer's connections work before (600 round trips on 3)", out == "warm", out)
    say(cli, "scribble")
    out = line(cli)
    check("8. the hostile peer found and scribbled the link", out == "scribbled 1", out)
    out = line(cli, 30)
    check("8. its connections keep working after (3,000 round trips, none lost)", out.startswith("pingpong ok"), out)
    check("8. the server is alive", srv.poll() is None)
    cli.stdin.close()
    cli.wait(timeout=10)
    srv.kill()
    err = srv.stderr.read()
    check("8. the server took announcements from the link before", "announcements taken" in err, err[-600:])
    check("8. ... and logged the broken queue for the operator", "broke the rules" in err, err[-600:])

    # ---- 9, 10. sleepers while another thread polls ---------------------------
    def sleepers(num, what, args):
        """sleeper_given_conn.py ARGS natively and under dsock: 5 of 5 each,
        the connections on the rings"""
        ls = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sleeper_given_conn.py")
        nat = subprocess.run([PY, ls] + args, capture_output=True, text=True, timeout=120).stdout.split()
        rep = os.path.join(tmp, "ls%d.report" % num)
        ds = subprocess.run([DSOCK, "run", "--", PY, ls] + args, env=dict(ENV, DSOCK_FASTPATH_REPORT=rep),
                            capture_output=True, text=True, timeout=120)
        try:
            rings = sum(int(l.split()[1]) for l in open(rep))
        except OSError:
            rings = 0
        check("%d. %s: natively 5 of 5" % (num, what), nat == ["woke", "5"], nat)
        check("%d. ... and under dsock, 5 of 5, the connections on the rings" % num,
              ds.stdout.split() == ["woke", "5"] and rings >= 5, (ds.stdout, ds.stderr[-300:], rings))

    sleepers(9, "sleepers beside a busy poller wake (recv; epoll on a pipe, given a connection)", ["5"])
    sleepers(10, "a sleeper given a connection whose bytes are there wakes at the ADD", ["5", "before"])

    # ---- 11. a refused pairing's slot comes back after forks ---------------
    # (the daemon is stopped while both ends offer and the process forks, so
    # the pairing is pending at the fork for certain)
    REFUSED = r'''
import os, socket, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(8)
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
print("ready", flush=True); input()
c.sendall(b"x"); s.recv(1)       # both ends offer at their first call
pid = os.fork()                  # refuses the pending pairing
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("forked", flush=True); input()
time.sleep(0.3)                  # the results wait in the mail
c2 = socket.create_connection(l.getsockname()); s2, _ = l.accept()
for i in range(20):              # calls on another connection read them:
    c2.sendall(b"z"); s2.recv(1) # mapped, then refused
print("refused", flush=True); input()
r, w = os.pipe(); r2, w2 = os.pipe()
pid = os.fork()                  # a child that closes both, then waits
if pid == 0:
    c.close(); s.close(); os.write(w, b"x"); os.read(r2, 1); os._exit(0)
os.read(r, 1)
c.close(); s.close()
print("closed", flush=True); input()
os.write(w2, b"x"); os.waitpid(pid, 0)
'''
    p = under_dsock(REFUSED, env=dict(ENV, DSOCK_OFFER_CALLS="1"))
    ready = line(p)
    freed0, waiting0, dpid = stat_n("shm_slots_freed"), stat_n("shm_slots_waiting"), daemon_pid()
    os.kill(dpid, signal.SIGSTOP)
    try:
        say(p, "")
        forked = line(p)
    finally:
        os.kill(dpid, signal.SIGCONT)
    say(p, "")
    out = line(p)
    # (the first connection's two sockets: on the kernel, both ends paired)
    st = stat()
    first = [l for l in st.splitlines() if l.startswith("sock pid=%d " % p.pid) and (" id=2 " in l or " id=3 " in l)]
    check("11. a pairing pending at a fork is refused in the process (paired, on the kernel, the reason shown)",
          (ready, forked, out) == ("ready", "forked", "refused") and len(first) == 2 and
          all("path=kernel reason=forked-while-pending" in l for l in first) and stat_n("paired") >= 2,
          (ready, forked, out, st))
    say(p, "")
    out = line(p)
    end = time.time() + 5
    while time.time() < end and stat_n("shm_slots_freed") < freed0 + 1:
        time.sleep(0.05)
    # (the child still lives: once it leaves, the pools it inherited are
    # retired, whatever it counted)
    check("11. closed in a fork child and in the process, its slot is freed, none waits",
          out == "closed" and stat_n("shm_slots_freed") == freed0 + 1 and stat_n("shm_slots_waiting") == waiting0,
          (out, freed0, waiting0, stat()[:600]))
    say(p, "")
    p.wait(timeout=10)

    # ---- 12. a fork child's _exit retires the pools it inherited -----------
    INHERITS = r'''
import os, socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(8)
c = socket.create_connection(l.getsockname()); s, _ = l.accept()
def warm(n):
    for i in range(n):
        c.sendall(b"x"); s.recv(1)
warm(50)
print("paired", flush=True)
while input() == "more":         # until both ends are on the rings
    warm(10); print("paired", flush=True)
if sys.argv[1] == "fork":
    pid = os.fork()
    if pid == 0:
        os._exit(0)              # with both ends open: no release
else:                            # a program that adopts c, then does the same
    os.set_inheritable(c.fileno(), True)
    pid = os.posix_spawn(sys.executable, [sys.executable, "-c", "import os; os._exit(0)"], os.environ)
os.waitpid(pid, 0)
print("forked", flush=True); input()
c.close(); s.close()
print("closed", flush=True); input()
'''
    for how in ("fork", "spawn"):
        p = under_dsock(INHERITS, how)
        out = line(p)
        # (a pairing completes at the calls after its results came: the
        # first between two new processes may come after the warm-up)
        for _ in range(20):
            if on_shm(p.pid, 2, 0.2):
                break
            say(p, "more"); out = line(p)
        pools0, waiting0 = stat_n("shm_pools"), stat_n("shm_slots_waiting")
        check("12. (%s) a connection in a pool" % how, out == "paired" and on_shm(p.pid, 2) and pools0 >= 1, (out, stat()[:500]))
        say(p, "")
        line(p)
        say(p, "")
        out = line(p)
        end = time.time() + 5
        while time.time() < end and stat_n("shm_pools") >= pools0:
            time.sleep(0.05)
        check("12. (%s) its _exit with it open retires the pool, which goes once the connection closes" % how,
              out == "closed" and stat_n("shm_pools") == pools0 - 1 and stat_n("shm_slots_waiting") == waiting0,
              (out, pools0, waiting0, stat()[:500]))
        say(p, "")
        p.wait(timeout=10)

finally:
    for p in procs:
        if p.poll() is None:
            p.kill()
    subprocess.run([DSOCK, "stop"], env=ENV, capture_output=True, timeout=20)
    shutil.rmtree(tmp, ignore_errors=True)

print("faults: %d passed, %d failed" % (sum(results), len(results) - sum(results)))
sys.exit(0 if results and all(results) else 1)

#!/usr/bin/env python3
"""dsockd and the dsock CLI, end to end, on a private socket path:
start-on-demand by concurrent `dsock run`s (one daemon), registration and
socket events shown by `dsock stat`, fork children, malformed input on the
control socket (the daemon drops that client and keeps serving), a daemon
restart under a live process (it re-registers), clean shutdown.
Exit 0 on pass; prints 'daemon: N passed, N failed'."""
import os, re, socket, struct, subprocess, sys, tempfile, time

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
DSOCK = os.path.join(BUILD, "bin", "dsock")
tmp = tempfile.mkdtemp(prefix="dsock-dtest-")
SOCK = os.path.join(tmp, "d.sock")
ENV = dict(os.environ, DSOCK_SOCKET=SOCK)
results = []

def check(name, cond, detail=""):
    results.append(cond)
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else "  " + str(detail)), flush=True)

def dsock(*args, **kw):
    return subprocess.run([DSOCK, *args], env=ENV, capture_output=True, text=True, timeout=60, **kw)

def stat():
    r = dsock("stat", "--raw")
    return r.stdout if r.returncode == 0 else ""

def wait_for(pred, secs=5.0):
    end = time.time() + secs
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False

# the protocol version as the sources define it (bumped with each layout change)
MAGIC = 0x4b435344
VERSION = int(re.search(r"#define DSOCK_PROTO_VERSION (\d+)",
                        open(os.path.join(os.path.dirname(__file__), "../../src/common/proto.h")).read()).group(1))
def hdr(type_, payload=b"", magic=MAGIC, version=VERSION, length=None, seq=1):
    n = 16 + len(payload) if length is None else length
    return struct.pack("<IHHII", magic, version, type_, n, seq) + payload

def ctl():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(SOCK)
    return s

# 1. several `dsock run` at once start exactly one daemon
procs = [subprocess.Popen([DSOCK, "run", "--", "true"], env=ENV) for _ in range(6)]
codes = [p.wait(timeout=30) for p in procs]
check("concurrent dsock run all succeed", codes == [0] * 6, str(codes))
out = subprocess.run(["pgrep", "-f", "^dsockd$"], capture_output=True, text=True).stdout.split()
lockpid, lockver = (open(SOCK + ".lock").read().split() + ["", ""])[:2]
check("one daemon serves the path", lockpid.isdigit() and os.path.exists("/proc/" + lockpid), lockpid)
check("its lock file names its pid and protocol version", lockver == str(VERSION), (lockpid, lockver))
check("socket is private to the user (0600) unless root",
      (os.stat(SOCK).st_mode & 0o777) == (0o666 if os.geteuid() == 0 else 0o600), oct(os.stat(SOCK).st_mode))

# 2. exit status is the command's
check("exit status kept", dsock("run", "--", "sh", "-c", "exit 7").returncode == 7)
check("missing command is 127", dsock("run", "--", "/nonexistent/cmd").returncode == 127)
r = dsock("run", "--rules", "deny port banana", "--", "true")
check("bad rule is a clear error", r.returncode == 2 and "bad port" in r.stderr, r.stderr)

# 3. a live process and its sockets, seen by stat; a fork child inherits them
prog = r'''
import socket, os, sys, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname()); a, _ = l.accept()
for i in range(50):                 # a few round trips: the pairing lands
    c.send(b"x"); a.recv(1); a.send(b"y"); c.recv(1); time.sleep(0.002)
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); u.bind(("::1", 0))
pid = os.fork()
if pid == 0:
    time.sleep(30); os._exit(0)
print(pid, l.getsockname()[1], flush=True)
keep = []
for line in sys.stdin:              # "conn": make one more connection
    keep.append(socket.create_connection(l.getsockname())); keep.append(l.accept()[0])
    print("done", flush=True)
os.kill(pid, 9)
'''
p = subprocess.Popen([DSOCK, "run", "--", sys.executable, "-c", prog], env=ENV,
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
child, port = p.stdout.readline().split()
ok = wait_for(lambda: f"proc pid={p.pid}" in stat() or "ppid=" + str(p.pid) in stat())
s = stat()
lines = [l for l in s.splitlines() if l.startswith("sock ")]
mine = [l for l in lines if f"127.0.0.1:{port}" in l]
check("stat shows the process", ok, s[:500])
check("stat shows listener, connect and accept ends",
      any("state=listening" in l and "reason=listener" in l for l in mine) and
      any("via=connect" in l and "state=connected" in l for l in mine) and
      any("via=accept" in l for l in mine), "\n".join(mine))
check("stat shows both ends of the local connection on the fast path",
      wait_for(lambda: sum("path=shm reason=-" in l for l in stat().splitlines()
                           if f"127.0.0.1:{port}" in l and l.startswith("sock ")) >= 2),
      "\n".join(l for l in stat().splitlines() if f"127.0.0.1:{port}" in l))
check("stat shows the udp socket as not-tcp", any("proto=udp6" in l and "reason=not-tcp" in l for l in lines))
check("fork child registered with inherited sockets",
      wait_for(lambda: any(l.startswith(f"proc pid={child} ppid=") and "socks=4" in l for l in stat().splitlines())),
      [l for l in stat().splitlines() if l.startswith("proc")].__str__())

# 4. garbage on the control socket: that client is dropped, the daemon lives
before = stat()
bad = [b"", b"x", b"\0" * 15, hdr(1, magic=0x1234), hdr(1, version=9), hdr(99),
       hdr(3, b"abc"), hdr(2, b"\0" * 7), hdr(1, b"\xff" * 56), hdr(3, length=5),
       os.urandom(4096), os.urandom(100)]
dropped = 0
for msg in bad:
    s = ctl()
    try:
        s.send(msg)
        s.settimeout(2)
        # (one of another version gets an ERROR first, then the drop)
        if s.recv(100) == b"" or s.recv(100) == b"":
            dropped += 1
    except (ConnectionResetError, BrokenPipeError):
        dropped += 1
    except socket.timeout:
        pass
    s.close()
check("each malformed message drops its client", dropped == len(bad), f"{dropped}/{len(bad)}")
# a client of another build learns the daemon's version before the drop
s = ctl()
s.send(hdr(1, b"\0" * 56, version=VERSION + 1))
s.settimeout(2)
try:
    reply = s.recv(100)
except OSError:
    reply = b""
check("a client of another protocol version gets an ERROR naming ours (EPROTO)",
      len(reply) == 20 and struct.unpack("<IHHIIi", reply)[1:3] == (VERSION, 8) and
      struct.unpack("<IHHIIi", reply)[5] == 71, reply)
s.close()
big = ctl()
try:
    big.send(b"A" * 5000)
except OSError:
    pass
big.close()
# half a stream of messages, then silence, must not block others
idle = ctl()
idle.send(hdr(1, b"\0" * 8)[:10])
check("daemon still answers after garbage", "daemon pid=" in stat())
bad_msgs = int(stat().split("bad_msgs=")[1].split()[0])
check("malformed messages are counted", bad_msgs >= len(bad), str(bad_msgs))
# a library cannot pretend to be a CLI and vice versa
s = ctl(); s.send(hdr(3)); data = s.recv(4096); s.close()
check("a raw stat request gets records", data[:4] == struct.pack("<I", MAGIC))
idle.close()

# a connection's memory goes only to a holder of one of its two sockets:
# a registered process asking with a socket of no pairing gets no fd, and
# asking with no socket at all drops it
def hello():
    s = ctl()
    s.send(hdr(1, struct.pack("<Ii32s16sQII", 0, 0, b"probe", b"0", 0, 0, 0)))
    return s
lsn = socket.socket(); lsn.bind(("127.0.0.1", 0)); lsn.listen(1)
cli = socket.create_connection(lsn.getsockname()); srv, _ = lsn.accept()
s = hello()
# FETCH (type 11): sock id, transport (2: shm), padding
socket.send_fds(s, [hdr(11, struct.pack("<QH6x", 42, 2))], [cli.fileno()])
s.settimeout(5)
msg, fds, _, _ = socket.recv_fds(s, 4096, 1)
typ = struct.unpack_from("<H", msg, 6)[0] if len(msg) >= 8 else 0
sid, tp, _, result = struct.unpack_from("<QHHI", msg, 16) if len(msg) >= 32 else (0, 0, 0, 0)
check("a fetch with a socket of no pairing gets an answer without a resource",
      typ == 10 and sid == 42 and tp == 2 and result == 4 and not fds,
      f"type {typ} sock {sid} transport {tp} result {result} fds {fds}")
for fd in fds:
    os.close(fd)
s.send(hdr(11, struct.pack("<QH6x", 43, 2)))
try:
    gone = s.recv(100) == b""
except (ConnectionResetError, BrokenPipeError):
    gone = True
check("a fetch without its socket drops the client", gone)
for x in (s, cli, srv, lsn):
    x.close()

# offers, results and fetches go by transport: two registered clients offer
# the two ends of one TCP connection for the test transport "socketpair"
# (3); the daemon proves them one connection (the netns proof, 1) and
# gives each end of one socketpair, side 0 to the connecting end: bytes
# written into one come out of the other.  The daemon keeps neither end
# (each end's close must reach the other): a fetch by one end's socket for
# that transport is answered with none, for another transport too, and a
# close of one end is the other's EOF.  An offer naming no transport the
# daemon knows drops the client.
OFFER, FETCH = 9, 11
def offer(s, sid, role, transport, sock, proof=1):
    socket.send_fds(s, [hdr(OFFER, struct.pack("<QIHH", sid, role, transport, proof))], [sock.fileno()])
def result(s):
    msg, fds, _, _ = socket.recv_fds(s, 4096, 1)
    if len(msg) < 48:
        return (0, 0, 0, 0, fds)
    sid, tp, _, res, side = struct.unpack_from("<QHHII", msg, 16)
    return (sid, tp, res, side, fds)
lsn = socket.socket(); lsn.bind(("127.0.0.1", 0)); lsn.listen(1)
cli = socket.create_connection(lsn.getsockname()); srv, _ = lsn.accept()
a, b = hello(), hello()
a.settimeout(5); b.settimeout(5)
offer(b, 8, 2, 3, srv)          # the accepting end first: it waits 4 s
held = result(b)
offer(a, 7, 1, 3, cli)
ra, rb = result(a), result(b)
check("an offer for the test transport is held, then both ends are paired by it",
      held[:3] == (8, 3, 3) and ra[:4] == (7, 3, 1, 0) and rb[:4] == (8, 3, 1, 1) and
      len(ra[4]) == 1 and len(rb[4]) == 1, (held, ra, rb))
if len(ra[4]) == 1 and len(rb[4]) == 1:
    os.write(ra[4][0], b"through the pair")
    check("the two ends are one socketpair", os.read(rb[4][0], 100) == b"through the pair")
    socket.send_fds(a, [hdr(FETCH, struct.pack("<QH6x", 7, 3))], [cli.fileno()])
    f = result(a)
    check("a fetch for the transport is answered, with no end (the daemon kept none)",
          f[:4] == (7, 3, 4, 0) and not f[4], f)
    socket.send_fds(a, [hdr(FETCH, struct.pack("<QH6x", 7, 2))], [cli.fileno()])
    f2 = result(a)
    check("a fetch for another transport gets nothing", f2[:3] == (7, 2, 4) and not f2[4], f2)
    check("stat counts the test transport's pairs", "socketpair_conns=1" in stat(), stat()[:300])
    os.close(ra[4][0])
    check("one end's close is the other's EOF (the daemon holds neither)", os.read(rb[4][0], 100) == b"")
    for fd in rb[4] + f[4] + f2[4]:
        os.close(fd)
c = hello()
offer(c, 9, 1, 9, cli)
try:
    dropped = c.recv(100) == b""
except (ConnectionResetError, BrokenPipeError):
    dropped = True
check("an offer for a transport the protocol does not name drops the client", dropped)
for x in (a, b, c, cli, srv, lsn):
    x.close()

# a pool holds every connection between two processes: a FETCH of a pooled
# connection's memory is answered to the process that paired that end and to
# its line (a fork child), never to another holder of its socket (here one
# whose parent left, as a process that got the socket over SCM_RIGHTS).  Two
# clients of this process offer the two ends for shm (2): the link and pool
# come first, then PAIRED naming the pool, without an fd.
pool_fds = {}
def until_paired(s, sid):
    """(result, pool, fds, page) of sid's PAIRED or KERNEL; pools given on
    the way are kept in pool_fds by id."""
    while True:
        msg, fds, _, _ = socket.recv_fds(s, 4096, 1)
        rsid, tp, _, res, side = struct.unpack_from("<QHHII", msg, 16)
        pool, page = struct.unpack_from("<II", msg, 16 + 32)
        if res in (1, 2) and rsid == sid:
            return res, pool, fds, page
        if res == 7 and fds and pool not in pool_fds:
            pool_fds[pool] = fds.pop()
        for fd in fds:
            os.close(fd)
def fetch_from(sock_fd, sid):
    s = hello()
    s.settimeout(5)
    socket.send_fds(s, [hdr(FETCH, struct.pack("<QH6x", sid, 2))], [sock_fd])
    msg, fds, _, _ = socket.recv_fds(s, 4096, 1)
    s.close()
    for fd in fds:
        os.close(fd)
    return struct.unpack_from("<I", msg, 16 + 12)[0], len(fds)
def in_child(fn, orphan=False):
    """fn's answer from a fork child (orphan: a grandchild whose parent left)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if orphan:
            parent = os.getpid()
            if os.fork():
                os._exit(0)
            while os.getppid() == parent:
                time.sleep(0.01)
        try:
            os.write(w, repr(fn()).encode())
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    with os.fdopen(r) as f:
        return f.read()
lsn = socket.socket(); lsn.bind(("127.0.0.1", 0)); lsn.listen(1)
cli = socket.create_connection(lsn.getsockname()); srv, _ = lsn.accept()
a, b = hello(), hello()
a.settimeout(5); b.settimeout(5)
offer(b, 18, 2, 2, srv)
offer(a, 17, 1, 2, cli)
pa, pb = until_paired(a, 17), until_paired(b, 18)
check("two clients of one process pair a connection in a pool (no fd with PAIRED)",
      pa[:2] == (1, pb[1]) and pb[0] == 1 and pa[1] != 0 and not pa[2] and not pb[2] and pa[1] in pool_fds,
      (pa, pb))
check("the process that paired it fetches its memory", fetch_from(cli.fileno(), 17) == (4, 1))
check("a fork child of that process fetches it too",
      in_child(lambda: fetch_from(cli.fileno(), 17)) == repr((4, 1)))
check("a holder of the socket outside that process's line gets no memory",
      in_child(lambda: fetch_from(cli.fileno(), 17), orphan=True) == repr((4, 0)))
# a slot goes to a new connection only once no process maps it: the pair
# above ends (both sides refused, which the dead sweep that each pairing runs
# reads) while its header still counts a process on side 0, and the sweep
# leaves it; once the count is 0 the sweep ends the pair and frees its slot
import mmap as mm
with open(os.path.join(tmp, "offs.c"), "w") as f:
    f.write('#include "common/shm_layout.h"\n#include <stddef.h>\n#include <stdio.h>\n'
            'int main(void) { printf("%zu %zu %zu", offsetof(struct dsock_shm_hdr, maps),\n'
            '  offsetof(struct dsock_shm_hdr, side[0].attached), offsetof(struct dsock_shm_hdr, side[1].attached)); }\n')
offs = subprocess.run(["sh", "-c", "cc -Isrc -o %s/offs %s/offs.c && %s/offs" % (tmp, tmp, tmp)],
                      cwd=os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."),
                      capture_output=True, text=True).stdout.split()
def stat_n(name):
    m = re.search(r"\b%s=(\d+)" % name, stat())
    return int(m.group(1)) if m else -1
def end_pair(page, mapped):
    view = mm.mmap(pool_fds[pa[1]], 0)
    base = page * 4096
    struct.pack_into("<II", view, base + int(offs[0]), mapped, 0)
    struct.pack_into("<I", view, base + int(offs[1]), 2)
    struct.pack_into("<I", view, base + int(offs[2]), 2)
    view.close()
def pair_more(n, sid0):
    """n more pairings of the two clients (each runs the dead sweep)."""
    keep = []
    for k in range(n):
        l2 = socket.socket(); l2.bind(("127.0.0.1", 0)); l2.listen(1)
        c2 = socket.create_connection(l2.getsockname()); s2, _ = l2.accept()
        offer(b, sid0 + 2 * k + 1, 2, 2, s2)
        offer(a, sid0 + 2 * k, 1, 2, c2)
        r = until_paired(a, sid0 + 2 * k), until_paired(b, sid0 + 2 * k + 1)
        keep.append((l2, c2, s2, r))
    return keep
if len(offs) == 3:
    live0, freed0 = stat_n("live"), stat_n("shm_slots_freed")
    end_pair(pa[3], 1)
    more = pair_more(3, 100)
    check("a pair whose slot a process still maps is not ended by the sweep",
          stat_n("live") == live0 + 3 and stat_n("shm_slots_freed") == freed0, (live0, freed0, stat()[:400]))
    end_pair(pa[3], 0)
    more += pair_more(3, 200)
    check("... and once nobody maps it, the sweep ends it and frees its slot",
          stat_n("live") == live0 + 5 and stat_n("shm_slots_freed") == freed0 + 1 and
          stat_n("shm_slots_waiting") == 0, (live0, freed0, stat()[:400]))
    for l2, c2, s2, _ in more:
        for x in (l2, c2, s2):
            x.close()
else:
    check("the header's offsets from shm_layout.h", False, offs)
for fd in pool_fds.values():
    os.close(fd)
for x in (a, b, cli, srv, lsn):
    x.close()

# 4a. results for a library that reads late: two clients offer the two
# ends of 400 connections while neither reads, so the daemon has 1,200
# results for them (HELD and PAIRED for each accepting end, PAIRED for each
# connecting end), far more than their sockets hold.  None is lost (the
# daemon keeps what does not fit and sends it when there is room), and
# each client gets them in order: HELD before PAIRED, and every PAIRED
# with its end of the pair.
import resource
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(_hard, 8192), _hard))
N = 400
lsn = socket.socket(); lsn.bind(("127.0.0.1", 0)); lsn.listen(N)
conns = []
for i in range(N):
    c = socket.create_connection(lsn.getsockname()); sv, _ = lsn.accept()
    conns.append((c, sv))
a, b = hello(), hello()
for i, (c, sv) in enumerate(conns):
    offer(b, 1000 + i, 2, 3, sv)
for i, (c, sv) in enumerate(conns):
    offer(a, 1000 + i, 1, 3, c)
def results_of(s, want_paired):
    got, paired, end = [], {}, time.time() + 20
    s.settimeout(1)
    while len(paired) < want_paired and time.time() < end:
        try:
            msg, fds, _, _ = socket.recv_fds(s, 4096, 1)
        except socket.timeout:
            continue
        if len(msg) >= 48 and struct.unpack_from("<H", msg, 6)[0] == 10:
            sid, tp, _, res, side = struct.unpack_from("<QHHII", msg, 16)
            got.append((sid, res))
            if res == 1 and len(fds) == 1:
                paired[sid] = fds[0]
                continue
        for fd in fds:
            os.close(fd)
    return got, paired
ga, pa = results_of(a, N)
gb, pb = results_of(b, N)
ids = set(range(1000, 1000 + N))
check("400 pairings for clients that read late: every result arrives, each PAIRED with its end",
      set(pa) == ids and set(pb) == ids and len(ga) == N and len(gb) == 2 * N,
      (len(pa), len(pb), len(ga), len(gb)))
check("... in order: each accepting end's HELD before its PAIRED",
      all(gb.index((i, 3)) < gb.index((i, 1)) for i in ids if (i, 3) in gb and (i, 1) in gb) and
      all((i, 3) in gb for i in ids), gb[:6])
ok = 0
for i in set(pa) & set(pb):
    os.write(pa[i], b"%d" % i)
    ok += os.read(pb[i], 100) == b"%d" % i
check("... and the two ends of each are one socketpair", ok == N, ok)
for fd in list(pa.values()) + list(pb.values()):
    os.close(fd)
for x in [a, b, lsn] + [y for pair in conns for y in pair]:
    x.close()
resource.setrlimit(resource.RLIMIT_NOFILE, (_soft, _hard))

# 4b. socket events without a message each (the event ring after the mail
# page): 3,000 connections opened and closed on the kernel (no data, so no
# pairing) all reach the daemon, in order (no record is left behind), though
# the ring holds 1,024: the half-full doorbell and the fallback to messages
def events():
    return int(stat().split("events=")[1].split()[0])
churn = r"""
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(64)
for i in range(3000):
    c = socket.create_connection(l.getsockname()); a, _ = l.accept(); c.close(); a.close()
print("done", flush=True); sys.stdin.read()
"""
before = events()
q = subprocess.Popen([DSOCK, "run", "--", sys.executable, "-c", churn], env=ENV,
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
check("a dsock process opens and closes 3,000 connections", q.stdout.readline().strip() == "done")
s = stat()
left = [l for l in s.splitlines() if l.startswith(f"sock pid={q.pid} ")]
check("every event of theirs reached the daemon (4 per connection)", events() - before >= 4 * 3000,
      f"{events() - before} events")
check("no record of a closed connection is left", len(left) == 1 and "state=listening" in left[0],
      "\n".join(left[:5]))
q.stdin.close(); q.wait(timeout=10)

# ... and from 4 threads at once (each event waits for another thread's
# send instead of going missing): 4 x 1,000 connections, no record left,
# none of their events counted lost
tchurn = r"""
import socket, sys, threading
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(256)
def run():
    for i in range(1000):
        c = socket.create_connection(l.getsockname()); c.close()
ts = [threading.Thread(target=run) for _ in range(4)]
for t in ts: t.start()
acc = [l.accept()[0] for _ in range(4000)]
for t in ts: t.join()
for a in acc: a.close()
print("done", flush=True); sys.stdin.read()
"""
q = subprocess.Popen([DSOCK, "run", "--", sys.executable, "-c", tchurn], env=ENV,
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
check("4 threads of a dsock process open and close 4,000 connections", q.stdout.readline().strip() == "done")
def left_of(pid):
    s = stat()
    return ([l for l in s.splitlines() if l.startswith(f"sock pid={pid} ")],
            [l for l in s.splitlines() if l.startswith(f"proc pid={pid} ")])
wait_for(lambda: len(left_of(q.pid)[0]) == 1)
left, procl = left_of(q.pid)
check("... no record of a closed connection is left, no event lost",
      len(left) == 1 and "state=listening" in left[0] and procl and " lost=0" in procl[0],
      "\n".join(procl + left[:5]))
q.stdin.close(); q.wait(timeout=10)

# a hostile event ring: garbage slots are refused and counted, a count out
# of range makes the daemon ignore that ring; it keeps serving, and a valid
# slot shows in stat
RING_OFF, SLOT, SLOTS = 4096, 72, 1024
MAIL_SIZE = (RING_OFF + 128 + SLOTS * (SLOT + 4) + 4095) // 4096 * 4096
def ev(event, fd, sid, state, path, reason, port):
    addr = struct.pack("<HH16s", 2, port, b"\0" * 10 + b"\xff\xff" + bytes([127, 0, 0, 1]))
    return struct.pack("<IiQHHHHHH", event, fd, sid, 2, 1, state, path, reason, 0) + addr + \
        struct.pack("<HH16s", 0, 0, b"\0" * 16) + b"\0" * 4
import mmap
mfd = os.memfd_create("hostile-mail", os.MFD_ALLOW_SEALING)
os.ftruncate(mfd, MAIL_SIZE)
import fcntl
fcntl.fcntl(mfd, 1033, 0x0002 | 0x0004 | 0x0001)  # F_ADD_SEALS: SHRINK | GROW | SEAL
mm = mmap.mmap(mfd, MAIL_SIZE)
h = ctl()
socket.send_fds(h, [hdr(1, struct.pack("<Ii32s16sQII", 0, 0, b"hostile", b"0", 0, 0, 0))], [mfd])
bad0 = int(stat().split("bad_msgs=")[1].split()[0])
mm[RING_OFF + 128:RING_OFF + 128 + 2 * SLOT] = os.urandom(2 * SLOT)
mm[RING_OFF + 128 + 2 * SLOT:RING_OFF + 128 + 3 * SLOT] = ev(1, 7, 77, 3, 1, 2, 4242)
mm[RING_OFF:RING_OFF + 8] = struct.pack("<Q", 3)
h.send(hdr(12))
s = stat()
check("garbage ring slots are refused and counted", int(s.split("bad_msgs=")[1].split()[0]) >= bad0 + 2, s[:300])
check("a valid ring slot shows in stat", any(l.startswith("sock pid=%d fd=7 id=77 " % os.getpid()) for l in s.splitlines()),
      "\n".join(l for l in s.splitlines() if "id=77" in l))
check("the daemon moved the ring's read count", struct.unpack_from("<Q", mm, RING_OFF + 64)[0] == 3)
mm[RING_OFF:RING_OFF + 8] = struct.pack("<Q", 10 ** 9)
h.send(hdr(12))
s = stat()
check("a ring count out of range is refused, the daemon serves on", "daemon pid=" in s and
      int(s.split("bad_msgs=")[1].split()[0]) >= bad0 + 3, s[:300])
h.close(); mm.close(); os.close(mfd)

# an event in the ring never overtakes a message sent before it: a CLOSE
# whose slot says "after message 2", read by the daemon (for a stat
# request, or before message 2 itself) while that message (the socket's
# CONNECT) is unread, waits for it; read first, it would leave a closed
# socket in stat
mfd = os.memfd_create("order-mail", os.MFD_ALLOW_SEALING)
os.ftruncate(mfd, MAIL_SIZE)
fcntl.fcntl(mfd, 1033, 0x0002 | 0x0004 | 0x0001)
mm = mmap.mmap(mfd, MAIL_SIZE)
h = ctl()
socket.send_fds(h, [hdr(1, struct.pack("<Ii32s16sQII", 0, 0, b"order", b"0", 0, 0, 0))], [mfd])
AFTER_OFF = RING_OFF + 128 + SLOTS * SLOT
mm[RING_OFF + 128:RING_OFF + 128 + SLOT] = ev(4, 9, 88, 5, 1, 2, 4343)
mm[AFTER_OFF:AFTER_OFF + 4] = struct.pack("<I", 2)
mm[RING_OFF:RING_OFF + 8] = struct.pack("<Q", 1)
stat()
check("a ring event written after an unread message waits for it",
      struct.unpack_from("<Q", mm, RING_OFF + 64)[0] == 0)
h.send(hdr(2, ev(2, 9, 88, 5, 1, 2, 4343), seq=2))
def applied_in_order():
    s = stat()
    return struct.unpack_from("<Q", mm, RING_OFF + 64)[0] == 1 and not any(
        l.startswith("sock pid=%d fd=9 id=88 " % os.getpid()) for l in s.splitlines())
check("... and follows it: the socket's CONNECT, then its CLOSE (no record left)", wait_for(applied_in_order),
      "\n".join(l for l in stat().splitlines() if "id=88" in l))
h.close(); mm.close(); os.close(mfd)

# a fork child holds what its parent held when it forked: a socket the
# parent told of after the fork (its ring event past the child's
# parent_evpos, or its message past parent_seq, read before the child's
# HELLO) is not the child's
mfd = os.memfd_create("fork-mail", os.MFD_ALLOW_SEALING)
os.ftruncate(mfd, MAIL_SIZE)
fcntl.fcntl(mfd, 1033, 0x0002 | 0x0004 | 0x0001)
mm = mmap.mmap(mfd, MAIL_SIZE)
h = ctl()
socket.send_fds(h, [hdr(1, struct.pack("<Ii32s16sQII", 0, 0, b"forker", b"0", 0, 0, 0))], [mfd])
mm[RING_OFF + 128:RING_OFF + 128 + SLOT] = ev(1, 5, 91, 3, 1, 2, 4444)
mm[RING_OFF + 128 + SLOT:RING_OFF + 128 + 2 * SLOT] = ev(1, 6, 92, 3, 1, 2, 4445)
mm[RING_OFF:RING_OFF + 8] = struct.pack("<Q", 2)
h.send(hdr(2, ev(1, 7, 93, 3, 1, 2, 4446), seq=2))
h.send(hdr(2, ev(1, 8, 94, 3, 1, 2, 4447), seq=3))
wait_for(lambda: "id=94 " in stat())
go_r, go_w = os.pipe()
kid = os.fork()
if kid == 0:
    k = ctl()
    k.send(hdr(1, struct.pack("<Ii32s16sQII", 1, os.getppid(), b"forked", b"0", 1, 2, 0)))
    os.read(go_r, 1)
    os._exit(0)
def kid_socks():
    return sorted(l.split(" id=")[1].split()[0] for l in stat().splitlines() if l.startswith(f"sock pid={kid} "))
check("a fork child inherits the sockets its parent held at the fork, not one opened after",
      wait_for(lambda: kid_socks() == ["91", "93"]), kid_socks())
os.write(go_w, b"x"); os.waitpid(kid, 0)
for x in (go_r, go_w):
    os.close(x)
h.close(); mm.close(); os.close(mfd)

# 4c. a connection that carries one exchange (a request, its answer, the
# close) is never offered: each end offers at its fourth data call
# (DSOCK_OFFER_CALLS), and the pairing could only land after the bytes
def pairings():
    d = [l for l in stat().splitlines() if l.startswith("daemon ")]
    return sum(int(d[0].split(k + "=")[1].split()[0]) for k in ("paired", "kernel", "pending")) if d else -1
EXCH = """
import socket, sys
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(64)
for n in map(int, sys.argv[1:]):
    c = socket.create_connection(l.getsockname()); s, _ = l.accept()
    for i in range(n):
        c.sendall(b"q" * 100); s.recv(100, socket.MSG_WAITALL); s.sendall(b"a" * 100); c.recv(100, socket.MSG_WAITALL)
    c.close(); s.recv(1); s.close()
print("done")
"""
before = pairings()
r = subprocess.run([DSOCK, "run", "--", sys.executable, "-c", EXCH] + ["1"] * 20, env=dict(ENV, DSOCK_FASTPATH="1"),
                   capture_output=True, text=True, timeout=60)
time.sleep(0.3)
check("20 one-exchange connections: none offered for pairing", r.stdout.strip() == "done" and pairings() == before,
      str((r.stdout, r.stderr[-300:], before, pairings())))
r = subprocess.run([DSOCK, "run", "--", sys.executable, "-c", EXCH, "10"], env=dict(ENV, DSOCK_FASTPATH="1"),
                   capture_output=True, text=True, timeout=60)
check("... while one of 10 exchanges is", r.stdout.strip() == "done" and wait_for(lambda: pairings() >= before + 1),
      str((r.stdout, r.stderr[-300:], before, pairings())))
r = subprocess.run([DSOCK, "run", "--", sys.executable, "-c", EXCH] + ["1"] * 5,
                   env=dict(ENV, DSOCK_FASTPATH="1", DSOCK_OFFER_CALLS="1"), capture_output=True, text=True, timeout=60)
check("... and with DSOCK_OFFER_CALLS=1 one-exchange connections are offered at once",
      r.stdout.strip() == "done" and wait_for(lambda: pairings() >= before + 6), str((r.stdout, before, pairings())))

# 4d. a daemon of another build: `dsock run` says so (its lock file gives
# the version) and runs the program; `dsock stop` ends one that cannot
# read its request (here a stand-in that drops every client) by the pid in
# its lock file
lock = open(SOCK + ".lock").read()
open(SOCK + ".lock", "w").write(lock.split()[0] + "\n")   # as a daemon from before protocol 3
r = subprocess.run([DSOCK, "run", "--", "true"], env=ENV, capture_output=True, text=True, timeout=30)
check("dsock run warns of a daemon of another protocol version, and runs", r.returncode == 0 and
      "speaks protocol version an older one" in r.stderr and "dsock stop" in r.stderr, r.stderr)
open(SOCK + ".lock", "w").write(lock)
r = subprocess.run([DSOCK, "run", "--", "true"], env=ENV, capture_output=True, text=True, timeout=30)
check("... and not of its own", r.returncode == 0 and r.stderr == "", r.stderr)
OLD = r"""
import os, signal, socket, sys
path = sys.argv[1]
l = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET); l.bind(path); l.listen(8)
open(path + ".lock", "w").write("%d\n" % os.getpid())
def bye(*_):
    os.unlink(path); sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("up", flush=True)
while True:
    c, _ = l.accept(); c.recv(100); c.close()
"""
oldsock = os.path.join(tmp, "old.sock")
q = subprocess.Popen([sys.executable, "-c", OLD, oldsock], stdout=subprocess.PIPE, text=True)
q.stdout.readline()
r = subprocess.run([DSOCK, "stop"], env=dict(ENV, DSOCK_SOCKET=oldsock), capture_output=True, text=True, timeout=30)
check("dsock stop ends a daemon that drops its request, by the pid in its lock",
      r.returncode == 0 and q.wait(timeout=10) == 0 and not os.path.exists(oldsock), (r.returncode, r.stderr))

# 5. restart the daemon under a live process: it re-registers and replays
dpid = int(open(SOCK + ".lock").read().split()[0])
r = dsock("stop")
check("dsock stop", r.returncode == 0 and wait_for(lambda: not os.path.exists("/proc/%d" % dpid)), r.stderr)
check("socket removed on shutdown", not os.path.exists(SOCK))
r = dsock("stat")
check("stat without daemon is a clear error", r.returncode == 1 and "daemon" in r.stderr, r.stderr)
subprocess.run([DSOCK, "run", "--", "true"], env=ENV, check=True)   # starts a new daemon
check("new daemon serves after restart", "daemon pid=" in stat())
# the live process reconnects on its next socket event (retries at most
# once a second) and replays what it holds
time.sleep(1.1)
p.stdin.write("conn\n"); p.stdin.flush()
check("live process works across the restart", p.stdout.readline().strip() == "done")
s = stat()
mine = [l for l in s.splitlines() if l.startswith(f"sock pid={p.pid} ")]
check("live process re-registered and replayed its sockets",
      any("state=listening" in l for l in mine) and len(mine) >= 5, "\n".join(mine) or s[:300])
p.stdin.close(); p.wait(timeout=10)

r = dsock("stop")
check("final stop", r.returncode == 0)
passed = sum(results); failed = len(results) - passed
print(f"daemon: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)

"""What the tests of the kernel-recorded proof share (test_proof.py,
test_forge.py): the test's own daemon (DSOCK_BPF_PROOF=1, its socket in a
temporary directory), the processes it starts in namespaces under dsock,
the echo server and client they run, and the checks.  BUILD is the
script's first argument."""
import os, shutil, signal, subprocess, sys, tempfile, time

BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build")
DSOCK = os.path.join(BUILD, "bin", "dsock")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
tmp = tempfile.mkdtemp(prefix="dsock-proof-")
SOCK = os.path.join(tmp, "d.sock")
ENV = dict(os.environ, DSOCK_SOCKET=SOCK, DSOCK_BPF_PROOF="1", PYTHONUNBUFFERED="1")
NS = ["dsockP1", "dsockP2", "dsockT1a", "dsockT1b", "dsockT2a", "dsockT2b"]
results, procs = [], []

SERVER = r'''
import socket, sys
addr, port, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if sys.argv[4:] == ["tfo"]: l.setsockopt(socket.IPPROTO_TCP, socket.TCP_FASTOPEN, 16)
if sys.argv[4:] == ["defer"]: l.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 5)
l.bind((addr, port)); l.listen(8); print("ready", flush=True)
a, _ = l.accept()
def take(n):
    got = b""
    while len(got) < n:
        b = a.recv(n - len(got))
        if not b: sys.exit(0)
        got += b
    return got
while True:
    a.sendall(tag + take(take(1)[0]))
'''

# Sends messages of many sizes (a length byte first), each answered by the
# server's tag and the message, one at a time: checks every byte.
CLIENT = r'''
import socket, sys, random
addr, port, tag, sport = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), int(sys.argv[4])
c = socket.socket()
if sport: c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); c.bind(("0.0.0.0", sport))
if sys.argv[5:] == ["tfo"]:  # TCP Fast Open: a first, empty message in the SYN
    c.sendto(b"\0", socket.MSG_FASTOPEN, (addr, port))
    got = b""
    while len(got) < len(tag):
        got += c.recv(len(tag) - len(got)) or sys.exit(1)
else:
    c.connect((addr, port))
rnd = random.Random(7)
def echoes():
    for i in range(400):
        m = bytes(rnd.getrandbits(8) for _ in range(1 + i % 97))
        c.sendall(bytes([len(m)]) + m)
        want, got = len(tag) + len(m), b""
        while len(got) < want:
            b = c.recv(want - len(got))
            if not b: print("eof", flush=True); sys.exit(1)
            got += b
        if got != tag + m: print("bad", got[:40], flush=True); sys.exit(1)
echoes()
try:  # the socket's own record (struct dsock_ident_rec, read-only, through the getsockopt program)
    r = c.getsockopt(0x6473, 2, 64)
    rec = "no-record" if len(r) != 32 else "complete" if int.from_bytes(r[24:28], "little") & 12 == 12 else "half"
except OSError as e:
    rec = "no-record"
try:  # a forged record: no call writes one
    c.setsockopt(0x6473, 2, bytes(32))
    rec += " forged"
except OSError:
    pass
if rec == "complete" and c.getsockopt(0x6473, 2, 64) != r:
    rec += " changed"
print("ok", rec, flush=True)
while sys.stdin.readline():  # each line: 400 echoes more
    echoes()
    print("ok", flush=True)
'''


# Many connections at once: a server that tags every echo on every
# connection (one thread each) and a client that opens N connections from
# client ports 40000.. at the same moment, then runs rounds of a message on
# each; it prints "ok N" when every answer was its own server's.
SERVER_MANY = r'''
import socket, sys, threading
addr, port, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind((addr, port)); l.listen(128); print("ready", flush=True)
def serve(a):
    while True:
        n = a.recv(1)
        if not n: return
        got = b""
        while len(got) < n[0]:
            got += a.recv(n[0] - len(got))
        a.sendall(tag + got)
while True:
    threading.Thread(target=serve, args=(l.accept()[0],), daemon=True).start()
'''
CLIENT_MANY = r'''
import socket, sys, random
addr, port, tag, n = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), int(sys.argv[4])
cs = []
for i in range(n):
    c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    c.bind(("0.0.0.0", 40000 + i)); c.setblocking(False)
    try: c.connect((addr, port))
    except BlockingIOError: pass
    cs.append(c)
for c in cs: c.setblocking(True)
rnd = random.Random(n)
for r in range(60):
    ms = [bytes(rnd.getrandbits(8) for _ in range(1 + (r * 7 + i) % 90)) for i in range(n)]
    for c, m in zip(cs, ms): c.sendall(bytes([len(m)]) + m)
    for c, m in zip(cs, ms):
        got = b""
        while len(got) < len(tag) + len(m):
            b = c.recv(len(tag) + len(m) - len(got))
            if not b: print("eof", flush=True); sys.exit(1)
            got += b
        if got != tag + m: print("bad", got[:20], flush=True); sys.exit(1)
print("ok", n, flush=True)
sys.stdin.readline()
'''


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else "  " + str(detail)[-600:]), flush=True)


def line(p, secs=20):
    """The next stdout line of p, or '' after secs (a check fails, nothing hangs)."""
    import select
    r, _, _ = select.select([p.stdout], [], [], secs)
    return p.stdout.readline().strip() if r else ""


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True)


def start(ns, code, *args, plain=False, container=False, nodaemon=False, cgroup=None, env=None):
    pre = ["ip", "netns", "exec", ns] if ns else []
    if cgroup:  # in that cgroup (a directory under the cgroup-v2 root) from its start
        # (before `ip netns exec`, whose fresh /sys shows no cgroup mount)
        pre = ["sh", "-c", 'echo $$ > %s/cgroup.procs && exec "$@"' % cgroup, "sh"] + pre
    if container:  # its own mount and PID namespaces too (it is pid 1 there)
        pre += ["unshare", "--mount", "--pid", "--fork", "--mount-proc"]
    run = [] if plain else [DSOCK, "run", "--no-daemon", "--"] if nodaemon else [DSOCK, "run", "--"]
    p = subprocess.Popen(pre + run + [PY, "-c", code, *map(str, args)], env=dict(ENV, **(env or {})), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.append(p)
    return p


def paths(who):
    """The connected sockets of process `who` (its pid as the daemon sees
    it), or with `who` (a string) in their line."""
    r = subprocess.run([DSOCK, "stat", "--raw"], env=ENV, capture_output=True, text=True, timeout=20)
    mine = (lambda l: l.startswith("sock pid=%d " % who)) if isinstance(who, int) else (lambda l: who in l)
    return [l for l in r.stdout.splitlines() if l.startswith("sock ") and mine(l) and "state=connected" in l]


def wait_path(who, path, secs=5, n=1):
    end = time.time() + secs
    while time.time() < end:
        rows = paths(who)
        if len(rows) >= n and all("path=" + path in l for l in rows):
            return rows
        time.sleep(0.1)
    return paths(who) or ["(no connected socket)"]


def exchange(name, srv_ns, cli_ns, srv_addr, dial, port, tag, sport=0, plain_server=False, want="shm", dport=0,
             rec=None, tfo=False, why=None, defer=False, env=None):
    """A server in srv_ns and a client in cli_ns, 400 tagged echoes; both
    ends on `want` afterwards, the client's record `rec` (by default:
    none on loopback, complete on shm, else half).  The processes, for a
    caller to end.  tfo: the listener takes TCP Fast Open, the client
    connects by it; why: the reason each end on the kernel must show;
    defer: the listener takes TCP_DEFER_ACCEPT; env: the client's extra
    variables."""
    srv = start(srv_ns, SERVER, srv_addr, port, tag, *(["tfo"] if tfo else ["defer"] if defer else []),
                plain=plain_server)
    if line(srv) != "ready":
        check(name + ": server starts", False)
        return srv, None
    cli = start(cli_ns, CLIENT, dial, dport or port, tag, sport, *(["tfo"] if tfo else []), env=env)
    out = line(cli).split()
    check(name + ": every byte echoed, by its own server", out[:1] == ["ok"], out)
    rec = rec or ("no-record" if dial.startswith("127.") else "complete" if want == "shm" else "half")
    if rec != "any":
        check(name + ": the client's record: " + rec, out[1:] == [rec], out)
    rows = wait_path(cli.pid, want)
    check(name + ": the client is on " + want, all("path=" + want in l for l in rows), rows)
    if why:  # (once the daemon has answered, and the client has made calls
        # since, which take the answer in: until then it is pairing-pending)
        time.sleep(1)
        check(name + ": 400 echoes more", again(cli) == "ok")
        end_by = time.time() + 8
        while time.time() < end_by and not all("reason=" + why in l for l in rows):
            time.sleep(0.2)
            rows = paths(cli.pid)
        check(name + ": the client says why: " + why, rows and all("reason=" + why in l for l in rows), rows)
    if not plain_server:
        rows = wait_path(srv.pid, want)
        check(name + ": the server is on " + want, all("path=" + want in l for l in rows), rows)
    return srv, cli


def end(*ps):
    for p in ps:
        if p and p.poll() is None:
            p.kill()
            p.wait()


def netns_pair(a, b, addr_a, addr_b, dev):
    return sh("ip netns add {a} && ip netns add {b} && ip link add {d}a type veth peer name {d}b && "
              "ip link set {d}a netns {a} && ip link set {d}b netns {b} && "
              "ip -n {a} addr add {x}/24 dev {d}a && ip -n {b} addr add {y}/24 dev {d}b && "
              "ip -n {a} link set {d}a up && ip -n {b} link set {d}b up && "
              "ip -n {a} link set lo up && ip -n {b} link set lo up".format(a=a, b=b, d=dev, x=addr_a, y=addr_b))


def stop_daemon():
    """Stops this test's daemon and waits for it: its BPF links go with it
    (programs left attached would run at every connection on the host)."""
    try:
        pid = int(open(SOCK + ".lock").read().split()[0])
    except (OSError, ValueError, IndexError):
        pid = 0
    r = subprocess.run([DSOCK, "stop"], env=ENV, capture_output=True, text=True)
    end_by = time.time() + 5
    while pid and time.time() < end_by and os.path.exists("/proc/%d" % pid):
        time.sleep(0.05)
    if pid and os.path.exists("/proc/%d" % pid):
        print("(the daemon did not stop: %s; killed)" % r.stderr.strip())
        os.kill(pid, 9)


def start_daemon(extra=None):
    """Starts this test's daemon (by a first `dsock run`, with
    DSOCK_BPF_PROOF=1 and extra variables); True once it says its
    programs are attached."""
    log = SOCK + ".log"
    seen = os.path.getsize(log) if os.path.exists(log) else 0
    subprocess.run([DSOCK, "run", "--", "true"], env=dict(ENV, **(extra or {})), capture_output=True, timeout=30)
    time.sleep(0.2)
    return os.path.exists(log) and "kernel-recorded proof on" in open(log).read()[seen:]


def wait_log(text, n, secs=5):
    """Whether the daemon's log (since its last start) says text n times
    within secs."""
    end_by = time.time() + secs
    while time.time() < end_by:
        log = open(SOCK + ".log").read() if os.path.exists(SOCK + ".log") else ""
        if log[log.rfind("kernel-recorded proof on"):].count(text) >= n:
            return True
        time.sleep(0.1)
    return False


def maps_shm(p):
    """Whether process p maps connection memory of dsock's."""
    try:
        return "memfd:dsock" in open("/proc/%d/maps" % p.pid).read()
    except OSError:
        return False


def again(p):
    """400 echoes more on a client's connection: its answer line."""
    try:
        p.stdin.write("again\n")
        p.stdin.flush()
    except OSError:
        return "(gone)"
    return line(p)


def detach_programs():
    """Detaches by force every BPF link whose program is one of dsock's
    (BPF_LINK_DETACH: what root may do to any link); returns how many."""
    import ctypes, platform
    nr = {"x86_64": 321, "aarch64": 280}.get(platform.machine())
    if not nr:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)

    class Info(ctypes.Structure):  # the bpf_attr of BPF_OBJ_GET_INFO_BY_FD
        _fields_ = [("fd", ctypes.c_uint32), ("len", ctypes.c_uint32), ("info", ctypes.c_uint64)]

    def bpf(cmd, attr):
        return libc.syscall(nr, cmd, ctypes.byref(attr), ctypes.sizeof(attr))

    def info(fd, size):
        buf = (ctypes.c_uint8 * size)()
        a = Info(fd, size, ctypes.addressof(buf))
        return bytes(buf) if bpf(15, a) == 0 else b""  # BPF_OBJ_GET_INFO_BY_FD

    n, lid = 0, 0
    while True:
        a = (ctypes.c_uint32 * 3)(lid, 0, 0)
        if bpf(31, a) < 0:  # BPF_LINK_GET_NEXT_ID
            return n
        lid = a[1]
        lfd = bpf(30, (ctypes.c_uint32 * 3)(lid, 0, 0))  # BPF_LINK_GET_FD_BY_ID
        if lfd < 0:
            continue
        li = info(lfd, 64)
        pfd = bpf(13, (ctypes.c_uint32 * 3)(int.from_bytes(li[8:12], "little"), 0, 0)) if li else -1
        name = info(pfd, 256)[64:80].split(b"\0")[0] if pfd >= 0 else b""  # bpf_prog_info.name
        if name.startswith(b"dsock_") and bpf(34, (ctypes.c_uint32 * 1)(lfd)) == 0:  # BPF_LINK_DETACH
            n += 1
        for fd in (lfd, pfd):
            if fd >= 0:
                os.close(fd)


def cleanup(namespaces=NS):
    for ns in namespaces:
        sh("ip netns del " + ns)


def teardown(namespaces=NS):
    """Ends every process started, removes the namespaces, stops the
    daemon and removes its directory."""
    end(*procs)
    cleanup(namespaces)
    stop_daemon()
    shutil.rmtree(tmp, ignore_errors=True)


def summary(name):
    """Prints "NAME: N passed, N failed"; the exit status."""
    passed = sum(results)
    print("%s: %d passed, %d failed" % (name, passed, len(results) - passed))
    return 0 if passed == len(results) else 1

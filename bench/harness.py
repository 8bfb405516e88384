"""The benchmark suite's harness (bench/run.py): its options, the tools it
installs, and how one measurement runs a command natively and under dsock,
alternating, and keeps the figures in `results`."""
import argparse, os, resource, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=["quick", "full"], default="quick")
ap.add_argument("--build", default="build")
ap.add_argument("--secs", type=int, default=0)
ap.add_argument("--reps", type=int, default=0)
ap.add_argument("--out", default="bench/out")
ap.add_argument("--plots", default="bench/plots")
ap.add_argument("--only", default="", help="run only experiments whose name contains this")
ap.add_argument("--replot", action="store_true", help="draw the plots even with --only (those it has data for)")
args = ap.parse_args()


def ensure_tools():
    """Installs the programs measured and the plotting library when missing
    (Debian packages; needs root), and runs under the Python that has it."""
    need = [t for t in ("sockperf", "iperf3", "redis-server", "nginx", "wrk", "haproxy", "curl", "cc", "memcached",
                                "memcaslap") if not shutil.which(t)]
    try:
        import matplotlib  # noqa: F401
        have_mpl = True
    except ImportError:
        have_mpl = False
    sys_py = "/usr/bin/python3"
    if not have_mpl and os.path.exists(sys_py) and os.path.realpath(sys.executable) != os.path.realpath(sys_py):
        if subprocess.run([sys_py, "-c", "import matplotlib"], capture_output=True).returncode == 0:
            os.execv(sys_py, [sys_py] + sys.argv)
    if (need or not have_mpl) and os.geteuid() == 0:
        print(f"installing: {' '.join(need) or ''} {'python3-matplotlib' if not have_mpl else ''}", file=sys.stderr)
        subprocess.run(["bash", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                        "install-test-deps.sh")], check=False)
        if not have_mpl:
            subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "python3-matplotlib"],
                           env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), capture_output=True)
            if os.path.exists(sys_py) and os.path.realpath(sys.executable) != os.path.realpath(sys_py):
                os.execv(sys_py, [sys_py] + sys.argv)


ensure_tools()
# servers and load generators with 1,000 connections need more than 1,024 fds
_soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(_hard, 65536) if _hard != resource.RLIM_INFINITY else 65536, _hard))
FULL = args.mode == "full"
S = args.secs or (5 if FULL else 2)
REPS = args.reps or (3 if FULL else 1)
SIZES = [14, 64, 256, 1024, 4096, 16384, 65000] if FULL else [14, 1024, 16384]  # sockperf: at most 65507 B
UDP_SIZES = [14, 1024, 8192] if FULL else [14]
CONNS = [1, 10, 100, 1000, 5000, 10000, 100000] if FULL else [1, 100, 1000, 10000, 100000]
# connections one process may hold (each holds one end of each of its
# connections, and a listener, epoll and pipes): past it, bench/conns.c
# spreads them over several pairs of processes
PER_PROC = max(1000, resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 300)


def scale_pairs(n):
    return -(-n // PER_PROC)
# one process holds both ends of each (2 fds per connection: 9,000 keeps
# under a hard fd limit of 20,000, as on the project's VMs)
ONE = [1, 10, 100, 1000, 9000] if FULL else [1, 1000, 9000]
PAIRS = [1, 2, 3, 4] if FULL else [1, 4]
BUILD = os.path.abspath(args.build)
DSOCK = os.path.join(BUILD, "bin", "dsock")
HERE = os.path.dirname(os.path.abspath(__file__))
TMP = tempfile.mkdtemp(prefix="dsock-bench-")
os.chmod(TMP, 0o755)  # nginx's workers (nobody) must reach the files served
ENV = dict(os.environ, DSOCK_SOCKET=os.path.join(TMP, "d.sock"))
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
results = []


def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def wrap(mode, pin=None, pre=()):
    """The command prefix: pre (a namespace's `ip netns exec NS`, from a
    Place), taskset when pinned, `dsock run --` under dsock."""
    return list(pre) + (["taskset", "-c", pin] if pin else []) + ([DSOCK, "run", "--"] if mode == "dsock" else [])


def run(cmd, mode, pin=None, pre=()):
    return subprocess.run(wrap(mode, pin, pre) + cmd, env=ENV, capture_output=True, text=True, timeout=600)


def run_cpu(cmd, mode, pin=None, pre=()):
    """stdout and the CPU seconds (user + system) the command used."""
    p = subprocess.Popen(wrap(mode, pin, pre) + cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    out = p.stdout.read()
    _, _, ru = os.wait4(p.pid, 0)
    p.returncode = 0
    return out, ru.ru_utime + ru.ru_stime


def start(cmd, mode, pin=None, port=None, pre=()):
    p = subprocess.Popen(wrap(mode, pin, pre) + cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):  # until it listens (without connecting: iperf3 -1 serves one client)
        if port and subprocess.run(list(pre) + ["ss", "-ltnH", f"sport = :{port}"], capture_output=True,
                                   text=True).stdout.strip():
            break
        time.sleep(0.05)
    time.sleep(0.1)
    return p


def stop(p):
    """Stops a server; returns its CPU seconds."""
    try:
        os.kill(p.pid, signal.SIGINT)  # (not p.send_signal: it may reap the child first)
    except ProcessLookupError:
        pass
    for _ in range(50):
        r = os.wait4(p.pid, os.WNOHANG)
        if r[0]:
            p.returncode = 0
            return r[2].ru_utime + r[2].ru_stime
        time.sleep(0.1)
    os.kill(p.pid, signal.SIGKILL)  # (not p.kill(): it would reap the child first)
    _, _, ru = os.wait4(p.pid, 0)
    p.returncode = 0
    return ru.ru_utime + ru.ru_stime


def attempt(fn, *a):
    try:
        return fn(*a)
    except Exception as e:  # a failed measurement is reported, not hidden
        print(f"  {fn.__name__}{a}: failed: {e!r}", file=sys.stderr)
        return None


def summary(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "all": vals}


def measure(name, fn, *a, raw=None, metrics=None):
    """Runs fn(mode, *a) REPS times per mode, alternating.  fn returns a
    value or a tuple; metrics = [(suffix, unit, better, index)] names each."""
    if args.only and args.only not in name:
        return None
    got = {"native": [], "dsock": []}
    raws = []
    for _ in range(REPS):
        for mode in ("native", "dsock"):
            got[mode].append(attempt(fn, mode, *a))
        if callable(raw):
            raws.append(raw())  # right after dsock's: this VM's two vCPUs
            # change placement for minutes at a time (the raw ring's one-way
            # p50 0.11 <-> 0.45 us), and a reference taken once compared modes
    if callable(raw):
        raw = tuple(statistics.median(v[j] for v in raws) if raws[0][j] is not None else None
                    for j in range(len(raws[0])))
    for suffix, unit, better, i in metrics:
        pick = lambda v: None if v is None else (v[i] if isinstance(v, tuple) else v)
        r = {"experiment": name + suffix, "unit": unit, "better": better,
             "native": summary([pick(v) for v in got["native"]]),
             "dsock": summary([pick(v) for v in got["dsock"]]),
             "raw": raw[i] if isinstance(raw, tuple) else raw if i == 0 else None}
        results.append(r)
        med = lambda k: r[k]["median"] if r[k] else None
        print(f"  {r['experiment']}: kernel {med('native')} dsock {med('dsock')} raw {r['raw']} {unit}",
              file=sys.stderr, flush=True)
    return got

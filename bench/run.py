#!/usr/bin/env python3
"""dsock benchmark suite: each experiment natively on kernel sockets, under
dsock, and where it applies against the raw shared-memory reference
(bench/rawshm.c), in one run, reported as ratios.

    bench/run.py [--mode quick|full] [--secs S] [--reps N] [--only TEXT]
                 [--build build] [--out bench/out] [--plots bench/plots]

quick (the default, about 3 minutes): one repetition, 2 s per measurement,
three message sizes.  full (about 40 minutes): three repetitions, 5 s,
seven message sizes, 1 to 10,000 connections, 1 to 4 pairs.  Each
measurement alternates kernel and dsock; with repetitions the median is
reported with the spread (min-max).  Writes bench/out/results-DATE.json,
PNG plots into --plots, and prints the markdown table that bench/RESULTS.md
holds.  Not a test: nothing here passes or fails."""
import argparse, json, os, re, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

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
import resource
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


def wrap(mode, pin=None):
    return (["taskset", "-c", pin] if pin else []) + ([DSOCK, "run", "--"] if mode == "dsock" else [])


def run(cmd, mode, pin=None):
    return subprocess.run(wrap(mode, pin) + cmd, env=ENV, capture_output=True, text=True, timeout=600)


def run_cpu(cmd, mode, pin=None):
    """stdout and the CPU seconds (user + system) the command used."""
    p = subprocess.Popen(wrap(mode, pin) + cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = p.stdout.read()
    _, _, ru = os.wait4(p.pid, 0)
    p.returncode = 0
    return out, ru.ru_utime + ru.ru_stime


def start(cmd, mode, pin=None, port=None):
    p = subprocess.Popen(wrap(mode, pin) + cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):  # until it listens (without connecting: iperf3 -1 serves one client)
        if port and subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout.strip():
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


# ---- the programs measured ---------------------------------------------------
def sockperf_pp(mode, size=14, pin=None, proto="--tcp"):
    p = port()
    pr = [proto] if proto else []  # UDP is sockperf's default: no flag
    srv = start(["sockperf", "server", *pr, "-i", "127.0.0.1", "-p", str(p)], mode, pin)
    out = run(["sockperf", "ping-pong", *pr, "--mps", "5000000", "-i", "127.0.0.1", "-p", str(p), "-m", str(size),
               "-t", str(S)], mode, pin).stdout
    stop(srv)
    g = lambda pct: float(re.search(r"percentile %s =\s+([\d.]+)" % pct, out).group(1))
    return g("50.000"), g("99.000"), g("99.900")


def sockperf_tp(mode, size=14, proto="--tcp"):
    p = port()
    pr = [proto] if proto else []
    srv = start(["sockperf", "server", *pr, "-i", "127.0.0.1", "-p", str(p)], mode)
    out, ccpu = run_cpu(["sockperf", "throughput", *pr, "-i", "127.0.0.1", "-p", str(p), "-m", str(size),
                         "-t", str(S)], mode)
    scpu = stop(srv)
    rate = int(re.search(r"Message Rate is (\d+)", out).group(1))
    # UDP: what the server received is what counts; sockperf reports the sent rate
    return rate, round(rate * size * 8 / 1e9, 3), round((ccpu + scpu) / max(1, rate * S) * 1e9, 1)


def pairs(mode, n):
    """n sockperf ping-pong pairs at once: total round trips/s, worst p99."""
    ports = [port() for _ in range(n)]
    srvs = [start(["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(p)], mode, port=p) for p in ports]
    clis = [subprocess.Popen(wrap(mode) + ["sockperf", "ping-pong", "--tcp", "--mps", "5000000", "-i", "127.0.0.1",
                                           "-p", str(p), "-m", "14", "-t", str(S)],
                             env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for p in ports]
    outs = [c.communicate(timeout=S * 10 + 60)[0] for c in clis]
    for srv in srvs:
        stop(srv)
    rate = sum(int(re.search(r"ReceivedMessages=(\d+)", o).group(1)) /
               float(re.search(r"RunTime=([\d.]+)", o).group(1)) for o in outs)
    return round(rate), max(float(re.search(r"percentile 99.000 =\s+([\d.]+)", o).group(1)) for o in outs)


def iperf(mode, streams=1):
    p = port()
    srv = start(["iperf3", "-s", "-1", "-p", str(p), "-B", "127.0.0.1"], mode, port=p)
    out = run(["iperf3", "-c", "127.0.0.1", "-p", str(p), "-t", str(S), "-P", str(streams), "-J"], mode).stdout
    stop(srv)
    return round(json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9, 2)


def redis_server(mode, p, pin=None):
    return start(["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                 mode, pin, port=p)


def redis(mode, test="get", clients=1):
    p = port()
    srv = redis_server(mode, p)
    # (at least 250 requests per client: with 1,000 clients the connects
    # are not all the run measures)
    n = max(25000 * S, 250 * clients)
    out = run(["redis-benchmark", "-p", str(p), "-t", test, "-c", str(clients), "-n", str(n), "-q"], mode).stdout
    stop(srv)
    m = re.search(r"%s: ([\d.]+) requests per second, p50=([\d.]+) msec" % test.upper(), out.replace("\r", "\n"))
    return float(m.group(2)) * 1000, float(m.group(1))


def memcached(mode, clients):
    """memcached (one worker thread, memory enough for every set of the
    run: evictions would make a faster run's gets misses, and cheaper)
    under memcaslap (Debian's libmemcached-tools: one thread, `clients`
    connections, 9:1 get:set): requests/s."""
    p = port()
    srv = start(["memcached", "-u", "root" if os.geteuid() == 0 else os.environ.get("USER", "nobody"),
                 "-l", "127.0.0.1", "-p", str(p), "-m", "4096", "-U", "0", "-t", "1", "-c", str(clients + 64)], mode, port=p)
    out = run(["memcaslap", "-s", f"127.0.0.1:{p}", "-T", "1", "-c", str(clients), "-t", f"{S}s"], mode).stdout
    stop(srv)
    return float(re.findall(r"TPS: (\d+)", out)[-1])


PGBIN = (sorted(__import__("glob").glob("/usr/lib/postgresql/*/bin")) or [None])[-1]
PG_AS = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []  # (postgres refuses root)


def pg_data():
    """A database for pgbench (scale 1), made once per run, natively."""
    d = os.path.join(TMP, "pg")
    if not os.path.exists(d):
        os.mkdir(d)
        if PG_AS:
            shutil.chown(d, "postgres")
        subprocess.run(PG_AS + [PGBIN + "/initdb", "-D", d + "/data", "-A", "trust", "-U", "postgres"],
                       env=ENV, capture_output=True, check=True)
        srv, p = pg_start("native")
        subprocess.run(PG_AS + ["pgbench", "-h", "127.0.0.1", "-p", str(p), "-U", "postgres", "-i", "-s", "1",
                                "postgres"], env=ENV, capture_output=True, check=True)
        pg_stop()
    return d


def pg_start(mode):
    d, p = os.path.join(TMP, "pg"), port()
    srv = subprocess.Popen(PG_AS + wrap(mode) + [PGBIN + "/postgres", "-D", d + "/data", "-h", "127.0.0.1",
                           "-p", str(p), "-k", d, "-c", "fsync=off", "-c", "max_connections=300"],
                           env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if subprocess.run([PGBIN + "/pg_isready", "-q", "-h", "127.0.0.1", "-p", str(p)]).returncode == 0:
            break
        time.sleep(0.1)
    return srv, p


def pg_stop():
    subprocess.run(PG_AS + [PGBIN + "/pg_ctl", "-D", os.path.join(TMP, "pg", "data"), "-m", "fast", "-w", "stop"],
                   env=ENV, capture_output=True)


def pgbench(mode, clients):
    """PostgreSQL (its postmaster forks a backend for each connection, which
    pairs once the postmaster closed its copy) under pgbench's read-only
    load (-S: one indexed SELECT per transaction, `clients` connections in
    at most 2 threads): the average latency and transactions/s."""
    pg_data()
    srv, p = pg_start(mode)
    out = subprocess.run(PG_AS + wrap(mode) + ["pgbench", "-h", "127.0.0.1", "-p", str(p), "-U", "postgres",
                         "-c", str(clients), "-j", str(min(2, clients)), "-T", str(S), "-S", "postgres"],
                         env=ENV, capture_output=True, text=True, timeout=600).stdout
    pg_stop()
    srv.wait(timeout=30)
    return (float(re.search(r"latency average = ([\d.]+) ms", out).group(1)) * 1000,
            float(re.search(r"tps = ([\d.]+)", out).group(1)))


def nginx_conf(d, p, upstream=None):
    os.makedirs(d + "/www", mode=0o755, exist_ok=True)
    open(d + "/www/s.txt", "w").write("x" * 100)
    with open(d + "/www/big.bin", "wb") as f:
        f.write(os.urandom(1 << 20))
    open(d + "/nginx.conf", "w").write(f"""worker_processes 1; pid {d}/nginx.pid; error_log {d}/e.log;
worker_rlimit_nofile 8192; events {{ worker_connections 4096; }} http {{ access_log off; sendfile on; client_body_temp_path {d}; proxy_temp_path {d};
fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
server {{ listen 127.0.0.1:{p} backlog=4096; root {d}/www; }} }}""")


def wrk(mode, url, conns):
    out = run(["wrk", "-t", "1" if conns == 1 else "2", "-c", str(conns), "-d", f"{S}s", "--latency", url], mode).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError("wrk: " + " ".join(l.strip() for l in out.splitlines() if "Non-2xx" in l or "errors" in l))
    lat = re.search(r"50%\s+([\d.]+)(us|ms|s)\b", out)
    p50 = float(lat.group(1)) * {"us": 1, "ms": 1000, "s": 1e6}[lat.group(2)]
    return p50, float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def nginx(mode, path="s.txt", conns=1):
    p = port(); d = os.path.join(TMP, f"ng-{mode}-{p}")
    nginx_conf(d, p)
    run(["nginx", "-c", d + "/nginx.conf", "-p", d], mode)
    time.sleep(0.4)
    try:
        return wrk(mode, f"http://127.0.0.1:{p}/{path}", conns)
    finally:
        subprocess.run(["kill", open(d + "/nginx.pid").read().strip()])


def download(mode, mib=64):
    """One large file from nginx (sendfile) to curl, written to a file, both
    under the mode: MiB/s, the median of 3 downloads.  (nginx only writes:
    a write-only side that never drained its peer's tokens made this 4-8x
    slower than the kernel until session 6.)"""
    p = port(); d = os.path.join(TMP, f"dl-{mode}-{p}")
    nginx_conf(d, p)
    with open(d + "/www/large.bin", "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
    run(["nginx", "-c", d + "/nginx.conf", "-p", d], mode)
    time.sleep(0.4)
    rates = []
    try:
        for _ in range(3):
            out = run(["curl", "-sf", "-o", d + "/got.bin", "-w", "%{time_total}",
                       f"http://127.0.0.1:{p}/large.bin"], mode)
            if out.returncode or os.path.getsize(d + "/got.bin") != mib << 20:
                raise RuntimeError("curl: download failed")
            rates.append(mib / float(out.stdout))
    finally:
        subprocess.run(["kill", open(d + "/nginx.pid").read().strip()])
        for f in (d + "/www/large.bin", d + "/got.bin"):
            if os.path.exists(f):
                os.unlink(f)
    return sorted(rates)[1]


def haproxy_front(mode, d, h, p):
    """haproxy on port h in front of the HTTP server on port p (config in d)."""
    open(d + "/haproxy.cfg", "w").write(f"""defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend f
  bind 127.0.0.1:{h}
  default_backend b
backend b
  http-reuse always
  server n 127.0.0.1:{p}
""")
    return start(["haproxy", "-f", d + "/haproxy.cfg"], mode, port=h)


def wrk_via_haproxy(mode, d, h, p, path, conns):
    """nginx as configured in d (listening on p) behind haproxy on h: wrk
    on path, then both stopped."""
    run(["nginx", "-c", d + "/nginx.conf", "-p", d], mode)
    hp = haproxy_front(mode, d, h, p)
    try:
        return wrk(mode, f"http://127.0.0.1:{h}/{path}", conns)
    finally:
        stop(hp)
        subprocess.run(["kill", open(d + "/nginx.pid").read().strip()])


def haproxy_nginx(mode, conns=1):
    """A web service front: haproxy in front of nginx, both under dsock."""
    p, h = port(), port(); d = os.path.join(TMP, f"hp-{mode}-{p}")
    nginx_conf(d, p)
    return wrk_via_haproxy(mode, d, h, p, "s.txt", conns)


def tool(name):
    """bench/NAME.c, compiled once per run."""
    exe = os.path.join(TMP, name)
    if not os.path.exists(exe):
        subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, name + ".c")], check=True)
    return exe


def nf_chain(mode, n):
    return float(run([tool("nfchain"), str(n), str(S)], mode).stdout.split()[0])


def web_service(mode, conns=1, pins=(None, None)):
    """wrk -> haproxy -> nginx -> webkv (bench/webkv.c) -> redis, all under dsock.
    pins: the CPUs of webkv and redis.  webkv asks redis over one connection,
    one request at a time, so the pipeline's rate follows that round trip,
    and the scheduler's placement of the two decides it (natively about
    28 k req/s on one CPU, 11 k on two, in session 7); unpinned, each setup
    lands in one mode or the other."""
    r, w, p, h = port(), port(), port(), port()
    d = os.path.join(TMP, f"web-{mode}-{p}")
    os.makedirs(d, mode=0o755, exist_ok=True)
    rs = redis_server(mode, r, pins[1])
    subprocess.run(["redis-cli", "-p", str(r), "set", "page", "v" * 100], capture_output=True)
    app = start([tool("webkv"), str(w), str(r), "page"], mode, pins[0], port=w)
    open(d + "/nginx.conf", "w").write(f"""worker_processes 1; pid {d}/nginx.pid; error_log {d}/e.log;
worker_rlimit_nofile 8192; events {{ worker_connections 4096; }} http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d};
fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
upstream app {{ server 127.0.0.1:{w}; keepalive 16; }}
server {{ listen 127.0.0.1:{p}; location / {{ proxy_pass http://app; proxy_http_version 1.1;
proxy_set_header Connection ""; }} }} }}""")
    try:
        return wrk_via_haproxy(mode, d, h, p, "page", conns)
    finally:
        stop(app)
        stop(rs)


def conn_rate(mode):
    return float(run([tool("conns"), "rate", str(S)], mode).stdout.split()[0])


def conn_req(mode):
    return float(run([tool("conns"), "req", str(S)], mode).stdout.split()[0])


def conn_scale(mode, n):
    out = run([tool("conns"), "scale", str(n), str(S), str(scale_pairs(n))], mode).stdout.split()
    mib = lambda k: round(int(k) / 1024, 1) if int(k) >= 0 else None  # negative: could not be read
    return float(out[0]), mib(out[1]), mib(out[2]), float(out[3])


def conn_one(mode, n):
    return float(run([tool("conns"), "one", str(n), str(S)], mode).stdout.split()[0])


def raw(kind, size):
    exe = os.path.join(TMP, "rawshm")
    if not os.path.exists(exe):
        subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, "rawshm.c")], check=True)
    count = 200000 if kind == "pingpong" else min(5000000, max(100000, int(4e9 / size)))
    out = subprocess.run([exe, kind, str(size), str(count)], capture_output=True, text=True).stdout.split()
    return (int(out[0]) / 1000, int(out[1]) / 1000) if kind == "pingpong" else int(out[0])


def idle_cpu(mode, n=1000):
    prog = f"""
import socket, os, sys, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(2000)
cs = []; ss = []
for i in range({n}):
    c = socket.create_connection(l.getsockname()); s, _ = l.accept()
    for _ in range(3):
        c.send(b"x"); s.recv(1); s.send(b"y"); c.recv(1)
    cs.append(c); ss.append(s)
time.sleep(0.5)
def cpu(): return sum(os.times()[:2])
t = cpu(); time.sleep({S}); print((cpu() - t) / {S} * 100)
"""
    return round(float(run([PY, "-c", prog], mode).stdout.strip()), 2)


# ---- the run -----------------------------------------------------------------
def wanted(name):
    return not args.only or args.only in name


run([DSOCK, "run", "--", "true"], "native")  # the daemon
t_start = time.time()
print(f"{args.mode} run: {REPS} repetition(s), {S} s per measurement...", file=sys.stderr)
PP = [(" p50 one-way", "us", "lower", 0), (" p99 one-way", "us", "lower", 1), (" p99.9 one-way", "us", "lower", 2)]
for size in SIZES:
    name = f"sockperf TCP ping-pong {size} B, unpinned,"
    if wanted(name):
        measure(name, sockperf_pp, size, raw=lambda: (*raw("pingpong", size), None), metrics=PP)
for size in ([14, 1024] if FULL else [14]):
    measure(f"sockperf TCP ping-pong {size} B, both on CPU 0,", sockperf_pp, size, "0", metrics=PP[:2])
for size in UDP_SIZES:
    measure(f"sockperf UDP ping-pong {size} B, unpinned,", sockperf_pp, size, None, "", metrics=PP[:2])
TP = [("", "msg/s", "higher", 0), (", bandwidth", "Gbit/s", "higher", 1), (", CPU per message", "ns", "lower", 2)]
for size in SIZES:
    name = f"sockperf TCP throughput {size} B"
    if wanted(name):
        r = raw("stream", size)
        measure(name, sockperf_tp, size, raw=(r, round(r * size * 8 / 1e9, 3), None), metrics=TP)
for size in UDP_SIZES:
    measure(f"sockperf UDP throughput {size} B (sent)", sockperf_tp, size, "", metrics=TP[:1])
for streams in (1, 4):
    measure(f"iperf3 {streams} stream{'s' if streams > 1 else ''}", iperf, streams,
            metrics=[("", "Gbit/s", "higher", 0)])
measure("connect/accept/close loop (bench/conns.c rate)", conn_rate, metrics=[("", "conn/s", "higher", 0)])
measure("one 100 B request per connection (bench/conns.c req)", conn_req, metrics=[("", "req/s", "higher", 0)])
for n in CONNS:
    spread = f" in {scale_pairs(n)} process pairs" if scale_pairs(n) > 1 else ""
    measure(f"{n} connections{spread}, 14 B round trips round-robin (bench/conns.c scale)", conn_scale, n,
            metrics=[("", "round trips/s", "higher", 0), (", RSS both processes", "MiB", "lower", 1),
                     (", shared memory both", "MiB", "lower", 2),
                     (", set-up (connect, 4 round trips each)", "s", "lower", 3)])
for n in ONE:
    measure(f"epoll_wait with one ready among {n} connections (bench/conns.c one)", conn_one, n,
            metrics=[(", send + wait + receive", "ns", "lower", 0)])
for n in PAIRS:
    measure(f"{n} ping-pong pair{'s' if n > 1 else ''} on 2 cores", pairs, n,
            metrics=[(", total", "round trips/s", "higher", 0), (", worst p99 one-way", "us", "lower", 1)])
RD = [(", p50", "us", "lower", 0), ("", "req/s", "higher", 1)]
for test in ("get", "set"):
    for clients in ((1, 50, 100, 1000) if FULL else (1, 50, 1000)):
        measure(f"redis-benchmark {test.upper()}, {clients} client{'s' if clients > 1 else ''}", redis, test, clients,
                metrics=RD)
for clients in ((50, 100, 1000) if FULL else (50, 1000)):
    measure(f"memcached, memcaslap {clients} clients (9:1 get:set)", memcached, clients,
            metrics=[("", "req/s", "higher", 0)])
if PGBIN and shutil.which("pgbench"):
    for clients in ((1, 8, 100) if FULL else (1, 8)):
        measure(f"PostgreSQL, pgbench -S {clients} client{'s' if clients > 1 else ''}", pgbench, clients,
                metrics=[(", latency average", "us", "lower", 0), ("", "transactions/s", "higher", 1)])
for path, label in (("s.txt", "100 B"), ("big.bin", "1 MiB")):
    for conns in (1, 32) + ((100, 1000) if FULL and label == "100 B" else (1000,) if label == "100 B" else ()):
        measure(f"nginx {label} file, wrk {conns} connection{'s' if conns > 1 else ''}", nginx, path, conns,
                metrics=RD)
measure("curl 64 MiB from nginx (sendfile), one download", download, metrics=[("", "MiB/s", "higher", 0)])
measure("haproxy -> nginx 100 B, wrk 1 connection", haproxy_nginx, 1, metrics=RD)
for conns in (1, 32):
    measure(f"web service: haproxy -> nginx -> webkv -> redis, wrk {conns} connection{'s' if conns > 1 else ''}",
            web_service, conns, metrics=RD)
for pins, where in ((("0", "0"), "on one CPU"), (("0", "1"), "on two CPUs")):
    measure(f"web service, wrk 32 connections, webkv and redis pinned {where}", web_service, 32, pins, metrics=RD)
for n in ([1, 2, 4] if FULL else [2]):
    measure(f"NF pipeline, 64 B packets through {n} forwarder{'s' if n > 1 else ''} (bench/nfchain.c)", nf_chain, n,
            metrics=[("", "packets/s", "higher", 0)])
measure("CPU of a process holding 1,000 idle connections", idle_cpu, metrics=[("", "% of a core", "lower", 0)])
subprocess.run([DSOCK, "stop"], env=ENV, capture_output=True)
elapsed = time.time() - t_start

# ---- outputs -----------------------------------------------------------------
os.makedirs(args.out, exist_ok=True)
stamp = time.strftime("%Y-%m-%dT%H%M%S")
meta = {"date": stamp, "mode": args.mode, "kernel": os.uname().release, "cpus": os.cpu_count(), "secs": S,
        "reps": REPS, "elapsed_s": round(elapsed)}
json.dump({"meta": meta, "results": results}, open(os.path.join(args.out, f"results-{stamp}.json"), "w"), indent=1)


def fmt(v):
    if v is None:
        return "n/a"
    x = v["median"]
    s = f"{x:.3g}" if x < 100 else f"{x:,.0f}"
    if REPS > 1 and v["min"] != v["max"]:
        lo, hi = v["min"], v["max"]
        s += f" ({lo:.3g}-{hi:.3g})" if hi < 100 else f" ({lo:,.0f}-{hi:,.0f})"
    return s


print(f"{args.mode.capitalize()} run, {REPS} repetition(s) of {S} s per measurement"
      f"{' (median, min-max)' if REPS > 1 else ''}, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} vCPUs, "
      f"Linux {os.uname().release}, {elapsed / 60:.0f} minutes.\n")
print("| experiment | unit | kernel | dsock | dsock vs kernel | raw shm | dsock / raw |")
print("|---|---|---|---|---|---|---|")
for r in results:
    n, d, w = r["native"], r["dsock"], r["raw"]
    nm, dm = (n or {}).get("median"), (d or {}).get("median")
    if not nm or not dm:
        ratio = "n/a"
    elif r["better"] == "lower":
        ratio = f"{nm / dm:.1f}x lower" if dm < nm else f"{dm / nm:.2f}x higher (worse)"
    else:
        ratio = f"{dm / nm:.2f}x"
    rr = f"{dm / w:.2f}x" if w and dm else "-"
    print(f"| {r['experiment']} | {r['unit']} | {fmt(n)} | {fmt(d)} | {ratio} | {w if w is not None else '-'} | {rr} |")


# ---- plots -------------------------------------------------------------------
def plots():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("\n(no plots: python3-matplotlib is not installed)", file=sys.stderr)
        return
    os.makedirs(args.plots, exist_ok=True)
    by = {r["experiment"]: r for r in results}

    def series(fmt_name, xs, key):
        name = fmt_name if callable(fmt_name) else fmt_name.format
        pts = [(x, by.get(name(x))) for x in xs]
        pts = [(x, r[key]["median"] if key != "raw" else r["raw"]) for x, r in pts if r and r.get(key)]
        return [p[0] for p in pts], [p[1] for p in pts]

    def figure(fname, title, xlabel, ylabel, fmt_name, xs, logy=True, keys=("native", "dsock", "raw")):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        labels = {"native": "kernel", "dsock": "dsock", "raw": "raw shared memory"}
        drawn = 0
        for k in keys:
            x, y = series(fmt_name, xs, k)
            if x:
                ax.plot(x, y, marker="o", label=labels[k])
                drawn += 1
        if not drawn:
            plt.close(fig)
            return
        if xlabel != "pairs":
            ax.set_xscale("log", base=2 if "size" in xlabel else 10)
        if logy:
            ax.set_yscale("log")
        ax.set_xlabel(xlabel); ax.set_ylabel(ylabel); ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3); ax.legend()
        fig.tight_layout(); fig.savefig(os.path.join(args.plots, fname), dpi=110); plt.close(fig)
        print(f"plot: {os.path.join(args.plots, fname)}", file=sys.stderr)

    figure("latency_vs_size.png", "TCP ping-pong, one-way p50 (sockperf, unpinned)", "message size (bytes)", "us",
           "sockperf TCP ping-pong {} B, unpinned, p50 one-way", SIZES)
    figure("throughput_vs_size.png", "TCP throughput (sockperf, one sender)", "message size (bytes)", "messages/s",
           "sockperf TCP throughput {} B", SIZES)
    figure("scaling_connections.png", "14 B round trips round-robin over N connections", "connections",
           "round trips/s", lambda n: f"{n} connections" + (f" in {scale_pairs(n)} process pairs" if scale_pairs(n) > 1
                                                          else "") + ", 14 B round trips round-robin (bench/conns.c scale)",
           CONNS,
           keys=("native", "dsock"))
    figure("pairs.png", "sockperf ping-pong pairs on 2 cores, total", "pairs", "round trips/s",
           lambda n: f"{n} ping-pong pair{'s' if n > 1 else ''} on 2 cores, total", PAIRS, logy=False,
           keys=("native", "dsock"))


if not args.only or args.replot:  # a partial run leaves the committed plots alone
    plots()
shutil.rmtree(TMP, ignore_errors=True)

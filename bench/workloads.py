"""The programs and workloads the benchmark suite (bench/run.py) measures:
each is fn(mode, ...) -> a figure or a tuple of figures, mode "native" or
"dsock"."""
import json, os, re, shutil, subprocess, time

from harness import (ENV, HERE, PY, S, TMP, port, run, run_cpu, start, stop, wrap, scale_pairs)
from places import LOOP

# ---- the programs measured ---------------------------------------------------
def sockperf_pp(mode, size=14, pin=None, proto="--tcp", at=LOOP):
    p = port()
    pr = [proto] if proto else []  # UDP is sockperf's default: no flag
    srv = start(["sockperf", "server", *pr, "-i", at.addr("server"), "-p", str(p)], mode, pin, pre=at.pre("server"))
    out = run(["sockperf", "ping-pong", *pr, "--mps", "5000000", "-i", at.dial("server"), "-p", str(p), "-m",
               str(size), "-t", str(S)], mode, pin, pre=at.pre("client")).stdout
    stop(srv)
    g = lambda pct: float(re.search(r"percentile %s =\s+([\d.]+)" % pct, out).group(1))
    return g("50.000"), g("99.000"), g("99.900")


def sockperf_tp(mode, size=14, proto="--tcp", at=LOOP):
    p = port()
    pr = [proto] if proto else []
    srv = start(["sockperf", "server", *pr, "-i", at.addr("server"), "-p", str(p)], mode, pre=at.pre("server"))
    out, ccpu = run_cpu(["sockperf", "throughput", *pr, "-i", at.dial("server"), "-p", str(p), "-m", str(size),
                         "-t", str(S)], mode, pre=at.pre("client"))
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


def iperf(mode, streams=1, at=LOOP):
    p = port()
    srv = start(["iperf3", "-s", "-1", "-p", str(p), "-B", at.addr("server")], mode, port=p, pre=at.pre("server"))
    out = run(["iperf3", "-c", at.dial("server"), "-p", str(p), "-t", str(S), "-P", str(streams), "-J"], mode,
              pre=at.pre("client")).stdout
    stop(srv)
    return round(json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9, 2)


def pp_beside_bulk(mode, at=LOOP):
    """sockperf TCP ping-pong (14 B) while an iperf3 stream runs between
    the same two places: the small messages' p50 and p99, us."""
    p, q = port(), port()
    bulk_srv = start(["iperf3", "-s", "-1", "-p", str(q), "-B", at.addr("server")], mode, port=q, pre=at.pre("server"))
    bulk = subprocess.Popen(wrap(mode, None, at.pre("client")) + ["iperf3", "-c", at.dial("server"), "-p", str(q),
                                                                   "-t", str(S + 4)],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    try:
        r = sockperf_pp(mode, 14, None, "--tcp", at)
    finally:
        bulk.wait(timeout=S * 4 + 60)
        stop(bulk_srv)
    return r[0], r[1]


def redis_server(mode, p, pin=None, at=LOOP):
    return start(["redis-server", "--port", str(p), "--bind", at.addr("db"), "--save", "", "--appendonly", "no",
                  "--protected-mode", "no"], mode, pin, port=p, pre=at.pre("db"))


def redis(mode, test="get", clients=1, at=LOOP):
    p = port()
    srv = redis_server(mode, p, at=at)
    # (at least 250 requests per client: with 1,000 clients the connects
    # are not all the run measures)
    n = max(25000 * S, 250 * clients)
    out = run(["redis-benchmark", "-h", at.dial("db"), "-p", str(p), "-t", test, "-c", str(clients), "-n", str(n),
               "-q"], mode, pre=at.pre("client")).stdout
    stop(srv)
    m = re.search(r"%s: ([\d.]+) requests per second, p50=([\d.]+) msec" % test.upper(), out.replace("\r", "\n"))
    return float(m.group(2)) * 1000, float(m.group(1))


def memcached(mode, clients, at=LOOP):
    """memcached (one worker thread, memory enough for every set of the
    run: evictions would make a faster run's gets misses, and cheaper)
    under memcaslap (Debian's libmemcached-tools: one thread, `clients`
    connections, 9:1 get:set): requests/s."""
    p = port()
    srv = start(["memcached", "-u", "root" if os.geteuid() == 0 else os.environ.get("USER", "nobody"),
                 "-l", at.addr("db"), "-p", str(p), "-m", "4096", "-U", "0", "-t", "1", "-c", str(clients + 64)], mode,
                port=p, pre=at.pre("db"))
    out = run(["memcaslap", "-s", f"{at.dial('db')}:{p}", "-T", "1", "-c", str(clients), "-t", f"{S}s"], mode,
              pre=at.pre("client")).stdout
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


def nginx_conf(d, p, addr="127.0.0.1"):
    os.makedirs(d + "/www", mode=0o755, exist_ok=True)
    open(d + "/www/s.txt", "w").write("x" * 100)
    with open(d + "/www/big.bin", "wb") as f:
        f.write(os.urandom(1 << 20))
    open(d + "/nginx.conf", "w").write(f"""worker_processes 1; pid {d}/nginx.pid; error_log {d}/e.log;
worker_rlimit_nofile 8192; events {{ worker_connections 4096; }} http {{ access_log off; sendfile on; client_body_temp_path {d}; proxy_temp_path {d};
fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
server {{ listen {addr}:{p} backlog=4096; root {d}/www; }} }}""")


def wrk(mode, url, conns, at=LOOP):
    out = run(["wrk", "-t", "1" if conns == 1 else "2", "-c", str(conns), "-d", f"{S}s", "--latency", url], mode,
              pre=at.pre("client")).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError("wrk: " + " ".join(l.strip() for l in out.splitlines() if "Non-2xx" in l or "errors" in l))
    lat = re.search(r"50%\s+([\d.]+)(us|ms|s)\b", out)
    p50 = float(lat.group(1)) * {"us": 1, "ms": 1000, "s": 1e6}[lat.group(2)]
    return p50, float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def nginx(mode, path="s.txt", conns=1, at=LOOP):
    p = port(); d = os.path.join(TMP, f"ng-{mode}-{p}")
    nginx_conf(d, p, at.addr("server"))
    run(["nginx", "-c", d + "/nginx.conf", "-p", d], mode, pre=at.pre("server"))
    time.sleep(0.4)
    try:
        return wrk(mode, f"http://{at.dial('server')}:{p}/{path}", conns, at)
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


def haproxy_front(mode, d, h, p, at=LOOP):
    """haproxy on port h in front of the HTTP server on port p (config in d)."""
    open(d + "/haproxy.cfg", "w").write(f"""defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
frontend f
  bind {at.addr("front")}:{h}
  default_backend b
backend b
  http-reuse always
  server n {at.dial("server")}:{p}
""")
    return start(["haproxy", "-f", d + "/haproxy.cfg"], mode, port=h, pre=at.pre("front"))


def wrk_via_haproxy(mode, d, h, p, path, conns, at=LOOP):
    """nginx as configured in d (listening on p) behind haproxy on h: wrk
    on path, then both stopped."""
    run(["nginx", "-c", d + "/nginx.conf", "-p", d], mode, pre=at.pre("server"))
    hp = haproxy_front(mode, d, h, p, at)
    try:
        return wrk(mode, f"http://{at.dial('front')}:{h}/{path}", conns, at)
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


def web_service(mode, conns=1, pins=(None, None), at=LOOP):
    """wrk -> haproxy -> nginx -> webkv (bench/webkv.c) -> redis, all under dsock.
    pins: the CPUs of webkv and redis.  webkv asks redis over one connection,
    one request at a time, so the pipeline's rate follows that round trip,
    and the scheduler's placement of the two decides it (natively about
    28 k req/s on one CPU, 11 k on two, in session 7); unpinned, each setup
    lands in one mode or the other."""
    r, w, p, h = port(), port(), port(), port()
    d = os.path.join(TMP, f"web-{mode}-{p}")
    os.makedirs(d, mode=0o755, exist_ok=True)
    rs = redis_server(mode, r, pins[1], at)
    subprocess.run(at.pre("db") + ["redis-cli", "-h", at.addr("db"), "-p", str(r), "set", "page", "v" * 100],
                   capture_output=True)
    app = start([tool("webkv"), str(w), str(r), "page", at.addr("app"), at.dial("db")], mode, pins[0], port=w,
                pre=at.pre("app"))
    open(d + "/nginx.conf", "w").write(f"""worker_processes 1; pid {d}/nginx.pid; error_log {d}/e.log;
worker_rlimit_nofile 8192; events {{ worker_connections 4096; }} http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d};
fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};
upstream app {{ server {at.dial("app")}:{w}; keepalive 16; }}
server {{ listen {at.addr("server")}:{p}; location / {{ proxy_pass http://app; proxy_http_version 1.1;
proxy_set_header Connection ""; }} }} }}""")
    try:
        return wrk_via_haproxy(mode, d, h, p, "page", conns, at)
    finally:
        stop(app)
        stop(rs)


def across(at):
    """conns's listener in the server's namespace (CONNS_NETNS), the loop
    in the client's: the prefix that runs it so."""
    if not at.spaces:
        return []
    return at.pre("client") + ["env", "CONNS_NETNS=/run/netns/" + at.pre("server")[-1], "CONNS_ADDR=" + at.addr("server")]


def conn_rate(mode, at=LOOP):
    return float(run([tool("conns"), "rate", str(S)], mode, pre=across(at)).stdout.split()[0])


def conn_req(mode, at=LOOP):
    return float(run([tool("conns"), "req", str(S)], mode, pre=across(at)).stdout.split()[0])


def conn_scale(mode, n):
    out = run([tool("conns"), "scale", str(n), str(S), str(scale_pairs(n))], mode).stdout.split()
    mib = lambda k: round(int(k) / 1024, 1) if int(k) >= 0 else None  # negative: could not be read
    # both processes map every page of their connections' shared memory,
    # so their RSS counts it twice: counted once here (KiB)
    rss, shm = int(out[1]), int(out[2])
    per_conn = round((rss - shm / 2) / n, 2) if rss >= 0 and shm >= 0 else None
    return float(out[0]), mib(out[1]), mib(out[2]), float(out[3]), per_conn


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

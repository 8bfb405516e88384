#!/usr/bin/env python3
"""dsock benchmark suite (quick mode): each experiment natively on kernel
sockets, under dsock, and where it applies against the raw shared-memory
reference, in one run, reported as ratios.

    bench/run.py [--build build] [--secs 3] [--out bench/out]

Writes bench/out/results-DATE.json and prints a markdown table (which is
what bench/RESULTS.md holds).  Not a test: nothing here passes or fails."""
import argparse, json, os, re, shutil, signal, socket, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
ap.add_argument("--secs", type=int, default=3)
ap.add_argument("--out", default="bench/out")
ap.add_argument("--only", default="", help="run only experiments whose name contains this")
args = ap.parse_args()
BUILD = os.path.abspath(args.build)
DSOCK = os.path.join(BUILD, "bin", "dsock")
TMP = tempfile.mkdtemp(prefix="dsock-bench-")
ENV = dict(os.environ, DSOCK_SOCKET=os.path.join(TMP, "d.sock"))
S = args.secs
results = []

def port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def run(cmd, mode, pin=None, **kw):
    pre = (["taskset", "-c", pin] if pin else []) + ([DSOCK, "run", "--"] if mode == "dsock" else [])
    return subprocess.run(pre + cmd, env=ENV, capture_output=True, text=True, timeout=300, **kw)

def start(cmd, mode, pin=None, port=None):
    pre = (["taskset", "-c", pin] if pin else []) + ([DSOCK, "run", "--"] if mode == "dsock" else [])
    p = subprocess.Popen(pre + cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # wait until it listens (without connecting: iperf3 -1 serves one client)
    for _ in range(100):
        if port and subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout.strip():
            break
        time.sleep(0.05)
    time.sleep(0.1)
    return p

def stop(p):
    p.send_signal(signal.SIGINT)
    try: p.wait(timeout=5)
    except subprocess.TimeoutExpired: p.kill(); p.wait()

def attempt(fn, *a):
    try:
        return fn(*a)
    except Exception as e:  # a failed measurement is reported, not hidden
        print(f"  {fn.__name__}{a}: failed: {e}", file=sys.stderr)
        return None

def pair(fn, *a, name=""):
    if args.only and args.only not in name:
        return None, None
    n, d = attempt(fn, "native", *a), attempt(fn, "dsock", *a)
    return n, d

def record(name, unit, native, dsock, raw=None, better="lower"):
    if args.only and args.only not in name:
        return
    r = {"experiment": name, "unit": unit, "native": native, "dsock": dsock, "raw": raw, "better": better}
    results.append(r)
    print(f"  {name}: native {native} dsock {dsock} raw {raw} {unit}", file=sys.stderr, flush=True)

def sockperf_pp(mode, pin=None, size=14):
    p = port()
    srv = start(["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(p)], mode, pin)
    out = run(["sockperf", "ping-pong", "--tcp", "--mps", "5000000", "-i", "127.0.0.1", "-p", str(p), "-m", str(size), "-t", str(S)], mode, pin).stdout
    stop(srv)
    g = lambda pct: float(re.search(r"percentile %s =\s+([\d.]+)" % pct, out).group(1))
    return g("50.000"), g("99.000")

def sockperf_tp(mode, size=14):
    p = port()
    srv = start(["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(p)], mode)
    out = run(["sockperf", "throughput", "--tcp", "-i", "127.0.0.1", "-p", str(p), "-m", str(size), "-t", str(S)], mode).stdout
    stop(srv)
    return int(re.search(r"Message Rate is (\d+)", out).group(1))

def pairs(mode, n=4):
    # n sockperf ping-pong pairs at once (8 processes on 2 cores): total
    # round trips per second and the worst p99
    ports = [port() for _ in range(n)]
    srvs = [start(["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", str(p)], mode, port=p) for p in ports]
    pre = [DSOCK, "run", "--"] if mode == "dsock" else []
    clis = [subprocess.Popen(pre + ["sockperf", "ping-pong", "--tcp", "--mps", "5000000", "-i", "127.0.0.1", "-p", str(p), "-m", "14",
                                    "-t", str(S)], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for p in ports]
    outs = [c.communicate(timeout=S * 10 + 30)[0] for c in clis]
    for srv in srvs:
        stop(srv)
    rate = sum(int(re.search(r"ReceivedMessages=(\d+)", o).group(1)) /
               float(re.search(r"RunTime=([\d.]+)", o).group(1)) for o in outs)
    p99 = max(float(re.search(r"percentile 99.000 =\s+([\d.]+)", o).group(1)) for o in outs)
    return round(rate), p99

def iperf(mode, streams=1):
    p = port()
    srv = start(["iperf3", "-s", "-1", "-p", str(p), "-B", "127.0.0.1"], mode, port=p)
    out = run(["iperf3", "-c", "127.0.0.1", "-p", str(p), "-t", str(S), "-P", str(streams), "-J"], mode).stdout
    stop(srv)
    return round(json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e9, 2)

def redis_get(mode, clients=1):
    p = port()
    srv = start(["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], mode, port=p)
    out = run(["redis-benchmark", "-p", str(p), "-t", "get", "-c", str(clients), "-n", str(20000 * S), "-q"], mode).stdout
    stop(srv)
    m = re.search(r"GET: ([\d.]+) requests per second, p50=([\d.]+) msec", out.replace("\r", "\n"))
    return float(m.group(2)) * 1000, float(m.group(1))

def nginx_small(mode):
    p = port(); d = os.path.join(TMP, "ng-" + mode)
    os.makedirs(d + "/www", exist_ok=True)
    open(d + "/www/s.txt", "w").write("x" * 90)
    open(d + "/nginx.conf", "w").write(f"""worker_processes 1; pid {d}/nginx.pid; error_log {d}/e.log;
events {{}} http {{ access_log off; client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d};
uwsgi_temp_path {d}; scgi_temp_path {d}; server {{ listen 127.0.0.1:{p}; root {d}/www; }} }}""")
    run(["nginx", "-c", d + "/nginx.conf", "-p", d], mode)
    time.sleep(0.4)
    out = run(["wrk", "-t", "1", "-c", "1", "-d", f"{S}s", "--latency", f"http://127.0.0.1:{p}/s.txt"], mode).stdout
    subprocess.run(["kill", open(d + "/nginx.pid").read().strip()])
    lat = re.search(r"50%\s+([\d.]+)(us|ms)", out)
    p50 = float(lat.group(1)) * (1000 if lat.group(2) == "ms" else 1)
    return p50, float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))

def raw(kind):
    exe = os.path.join(TMP, "rawshm")
    subprocess.run(["cc", "-O2", "-o", exe, os.path.join(os.path.dirname(__file__), "rawshm.c")], check=True)
    out = subprocess.run([exe, kind, "14", "200000" if kind == "pingpong" else "5000000"], capture_output=True, text=True).stdout.split()
    return (int(out[0]) / 1000, int(out[1]) / 1000) if kind == "pingpong" else int(out[0])

def idle_cpu(mode, n=1000):
    prog = f"""
import socket, os, sys, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(2000)
cs = []; ss = []
for i in range({n}):
    c = socket.create_connection(l.getsockname()); s, _ = l.accept()
    c.send(b"x"); s.recv(1); s.send(b"y"); c.recv(1)
    cs.append(c); ss.append(s)
def cpu(): return sum(os.times()[:2])
t = cpu(); time.sleep({S}); print((cpu() - t) / {S} * 100)
"""
    return round(float(run(["/usr/bin/python3", "-c", prog], mode).stdout.strip()), 2)

run([DSOCK, "run", "--", "true"], "native")
print("running (about %d s)..." % (S * 24), file=sys.stderr)
rp50, rp99 = raw("pingpong") if not args.only or "ping-pong 14 B" in args.only else (None, None)
pick = lambda v, i: v[i] if v else None
n, d = pair(sockperf_pp, name="sockperf TCP ping-pong 14 B, p50 one-way, unpinned p99")
record("sockperf TCP ping-pong 14 B, p50 one-way, unpinned", "us", pick(n, 0), pick(d, 0), rp50)
record("sockperf TCP ping-pong 14 B, p99 one-way, unpinned", "us", pick(n, 1), pick(d, 1), rp99)
n, d = pair(sockperf_pp, "0", name="sockperf TCP ping-pong 14 B, p50 one-way, both on CPU 0")
record("sockperf TCP ping-pong 14 B, p50 one-way, both on CPU 0", "us", pick(n, 0), pick(d, 0))
n, d = pair(sockperf_tp, name="sockperf TCP throughput 14 B")
record("sockperf TCP throughput 14 B", "msg/s", n, d, raw("stream") if n or d else None, "higher")
n, d = pair(sockperf_tp, 1024, name="sockperf TCP throughput 1 KiB")
record("sockperf TCP throughput 1 KiB", "msg/s", n, d, None, "higher")
n, d = pair(iperf, name="iperf3 1 stream")
record("iperf3 1 stream", "Gbit/s", n, d, None, "higher")
n, d = pair(redis_get, name="redis-benchmark GET, 1 client, p50")
record("redis-benchmark GET, 1 client, p50", "us", pick(n, 0), pick(d, 0))
record("redis-benchmark GET, 1 client", "req/s", pick(n, 1), pick(d, 1), None, "higher")
n, d = pair(nginx_small, name="nginx 90 B file, wrk 1 connection, p50")
record("nginx 90 B file, wrk 1 connection, p50", "us", pick(n, 0), pick(d, 0))
record("nginx 90 B file, wrk 1 connection", "req/s", pick(n, 1), pick(d, 1), None, "higher")
n, d = pair(idle_cpu, name="CPU of a process holding 1,000 idle connections")
record("CPU of a process holding 1,000 idle connections", "% of a core", n, d)
n, d = pair(pairs, name="4 ping-pong pairs on 2 cores")
record("4 ping-pong pairs on 2 cores, total", "round trips/s", pick(n, 0), pick(d, 0), None, "higher")
record("4 ping-pong pairs on 2 cores, worst p99 one-way", "us", pick(n, 1), pick(d, 1))
subprocess.run([DSOCK, "stop"], env=ENV, capture_output=True)

os.makedirs(args.out, exist_ok=True)
stamp = time.strftime("%Y-%m-%dT%H%M%S")
meta = {"date": stamp, "kernel": os.uname().release, "cpus": os.cpu_count(), "secs": S}
json.dump({"meta": meta, "results": results}, open(os.path.join(args.out, f"results-{stamp}.json"), "w"), indent=1)
print(f"Quick run, {S} s per measurement, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} vCPUs, Linux {os.uname().release}.\n")
print("| experiment | unit | kernel | dsock | dsock vs kernel | raw shm | dsock / raw |")
print("|---|---|---|---|---|---|---|")
for r in results:
    n, d, w = r["native"], r["dsock"], r["raw"]
    if n is None or d is None:
        ratio = "n/a"
    elif r["better"] == "lower":
        ratio = f"{n / d:.1f}x lower" if d and d < n else f"{d / n:.2f}x higher (worse)" if n else "-"
    else:
        ratio = f"{d / n:.2f}x" if n else "-"
    rr = f"{d / w:.1f}x" if w and d else "-"
    na = lambda v: "n/a" if v is None else v
    print(f"| {r['experiment']} | {r['unit']} | {na(n)} | {na(d)} | {ratio} | {w if w is not None else '-'} | {rr} |")
shutil.rmtree(TMP, ignore_errors=True)

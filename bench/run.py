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
import json, os, shutil, subprocess, sys, time

import places

from harness import (FULL, S, REPS, SIZES, UDP_SIZES, CONNS, ONE, PAIRS, DSOCK, ENV, TMP, args, measure, results,
                     run, scale_pairs)
from workloads import (PGBIN, conn_one, conn_rate, conn_req, conn_scale, download, haproxy_nginx, idle_cpu, iperf,
                       memcached, nf_chain, nginx, pairs, pgbench, pp_beside_bulk, raw, redis, sockperf_pp, sockperf_tp,
                       web_service)

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
for size in ([14, 1024] if FULL else [14]):
    measure(f"sockperf TCP ping-pong {size} B, connection kept on the kernel (DSOCK_FASTPATH=0), unpinned,",
            sockperf_pp, size, None, "--tcp", places.KEPT, metrics=PP[:2])
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
                     (", memory per connection (RSS of both processes / N, shared pages counted once)", "KiB",
                      "lower", 4),
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
# across network namespaces (bench/places.py), last: the daemon is
# restarted with the kernel-recorded proof (root), the only proof that
# pairs connections across namespaces; the kernel's figures are taken in
# the same namespaces, over the same bridge, with the programs attached
ACROSS = [
    ("sockperf TCP ping-pong 14 B, client and server in two namespaces (bridge),", sockperf_pp, (14, None, "--tcp"), "b", PP),
    ("sockperf TCP ping-pong 14 B, through DNAT,", sockperf_pp, (14, None, "--tcp"), "d", PP),
    ("sockperf TCP throughput 14 B, two namespaces (bridge)", sockperf_tp, (14, "--tcp"), "b", TP),
    ("redis-benchmark GET, 50 clients, two namespaces (bridge)", redis, ("get", 50), "b", RD),
    ("nginx 100 B file, wrk 32 connections, two namespaces (bridge)", nginx, ("s.txt", 32), "b", RD),
    ("nginx 100 B file, wrk 32 connections, through DNAT", nginx, ("s.txt", 32), "d", RD),
    ("web service, wrk 32 connections, each process in a namespace of its own (bridge)", web_service,
     (32, (None, None)), "b", RD),
    # set-up across namespaces: under dsock each connection is marked
    # (its SYN and SYN-ACK carry the nonces, the programs write records);
    # the kernel's are not: what the proof adds to a connection
    ("connect/accept/close loop, listener in another namespace (bridge)", conn_rate, (), "b",
     [("", "conn/s", "higher", 0)]),
    ("one 100 B request per connection, server in another namespace (bridge)", conn_req, (), "b",
     [("", "req/s", "higher", 0)]),
    # hosts of their own (a daemon each): nothing pairs; the spin on
    # kernel sockets is what dsock gives there
    ("sockperf TCP ping-pong 14 B, client and server on two hosts (namespaces, a daemon each),", sockperf_pp,
     (14, None, "--tcp"), "h", PP[:2]),
    ("sockperf TCP throughput 14 B, client and server on two hosts", sockperf_tp, (14, "--tcp"), "h", TP),
    ("redis-benchmark GET, 64 clients, client and server on two hosts", redis, ("get", 64), "h", RD),
    ("redis-benchmark SET, 64 clients, client and server on two hosts", redis, ("set", 64), "h", RD),
    ("memcached, memcaslap 64 clients (9:1 get:set), client and server on two hosts", memcached, (64,), "h",
     [("", "req/s", "higher", 0)]),
    ("iperf3 1 stream, client and server on two hosts", iperf, (1,), "h", [("", "Gbit/s", "higher", 0)]),
    ("iperf3 4 streams, client and server on two hosts", iperf, (4,), "h", [("", "Gbit/s", "higher", 0)]),
    ("sockperf TCP ping-pong 14 B beside an iperf3 stream, between the same two hosts,", pp_beside_bulk, (), "h",
     PP[:2]),
    # the same hosts, connections carried on a channel each (places.ChannelHosts)
    ("sockperf TCP ping-pong 14 B, two hosts, on channels,", sockperf_pp, (14, None, "--tcp"), "c", PP[:2]),
    ("sockperf TCP throughput 14 B, two hosts, on channels", sockperf_tp, (14, "--tcp"), "c", TP),
    ("redis-benchmark GET, 64 clients, two hosts, on channels", redis, ("get", 64), "c", RD),
    ("iperf3 1 stream, two hosts, on channels", iperf, (1,), "c", [("", "Gbit/s", "higher", 0)]),
]
PLAIN_COST = "connect/accept/close loop of a program not under dsock, listener in another namespace (bridge): kernel = no programs attached, dsock = the proving daemon's attached"


def plain_conn_rate(mode, at):
    """The proof's cost to every program on the host, dsock or not: the
    same native loop with the programs detached ("native") and attached
    ("dsock"); the daemon is restarted for each run."""
    if mode == "dsock":
        places.proving_daemon()
    else:
        places.plain_daemon()
    return conn_rate("native", at)


if any(wanted(a[0]) for a in ACROSS) or wanted(PLAIN_COST):
    if os.geteuid() != 0 or not shutil.which("nft"):
        print("across namespaces: skipped (needs root and nft)", file=sys.stderr)
    else:
        try:
            at = dict(zip("bd", places.build()), h=places.Hosts(), c=places.ChannelHosts())
            why = places.proving_daemon()
            if not why and any(wanted(a[0]) for a in ACROSS if a[3] in "hc"):
                at["h"].start()
            if why:
                print(f"across namespaces: skipped (the daemon did not attach its programs: {why})", file=sys.stderr)
            else:
                for name, fn, a, where, metrics in ACROSS:
                    measure(name, fn, *a, at[where],
                            raw=(lambda: (*raw("pingpong", 14), None)) if fn is sockperf_pp and where not in "hc" else None,
                            metrics=metrics)
                measure(PLAIN_COST, plain_conn_rate, at["b"], metrics=[("", "conn/s", "higher", 0)])
        finally:
            places.stop_daemon()
            places.stop_host_daemons()
            places.teardown()
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

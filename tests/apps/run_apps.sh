#!/usr/bin/env bash
# Real programs under `dsock run`, both ends, byte-exact where they move
# data: sockperf (TCP, UDP, --data-integrity), redis (cli + benchmark),
# nginx (wrk + a large curl download, checksum), iperf3, Python socket and
# asyncio echo, Node.js echo with and without io_uring, haproxy in front
# of nginx, memcached (memccp/memccat, memcaslap), PostgreSQL (psql COPY,
# pgbench), a Java NIO echo.  Each check also asks the daemon whether the program really ran
# under dsock, and each TCP client's library whether its connections moved
# bytes through shared memory.
# PLACE (root only but for loop) puts the servers and the clients in
# network namespaces of their own, as containers on one host
# (tests/lib/topo.sh): the client's, the server's and a front's (haproxy),
# on a Linux bridge; a daemon of the test's own proves their connections
# by the kernel-recorded proof (DSOCK_BPF_PROOF=1):
#   loop    every process in this namespace, on 127.0.0.1 and ::1;
#   bridge  the clients dial the servers' own addresses on the bridge;
#   dnat    the clients dial service addresses that the host rewrites to
#           the servers' and masquerades (a published port);
#   hosts   as bridge, but each namespace is a host of its own, with a
#           daemon of its own (its own socket, host key and allow-list of
#           the other two): the daemons prove the connections over their
#           links (tests/hosts/), and with no transport between hosts the
#           kernel carries them; where a check asks for shared memory it
#           asks instead that the client's daemon proved the connections
#           between hosts;
#   channels  as hosts, with the programs under dsock offering their
#           connections to the transport whose ends run over a channel
#           between hosts (DSOCK_TRANSPORTS=socketpair): the daemons set up
#           a channel per connection, and where a check asks for shared
#           memory it asks the client's library whether its connections
#           moved bytes through it.
# Usage: tests/apps/run_apps.sh [BUILD_DIR] [loop|bridge|dnat|hosts|channels]
# Closing line: "apps: N passed, N failed".
set -u
BUILD=$(cd "${1:-build}" && pwd)
PLACE=${2:-loop}
DSOCK="$BUILD/bin/dsock"
T=$(mktemp -d /tmp/dsock-apps-XXXXXX)
chmod 755 "$T"
export DSOCK_SOCKET="$T/dsockd.sock"
PASS=0 FAIL=0
PIDS=()
. "$(dirname "$0")/../lib/topo.sh"
NETNS=(dsockAh dsockAc dsockAs dsockAf)
# SRV, CLI, FRONT: the prefixes that run a command in the server's, the
# client's and the front's namespace; LISTEN*: the servers' addresses;
# DIAL*: the addresses the clients dial (FLISTEN, FDIAL: the front's)
case $PLACE in
loop)
	SRV=() CLI=() FRONT=()
	LISTEN=127.0.0.1 LISTEN6=::1 DIAL=127.0.0.1 DIAL6=::1 FLISTEN=127.0.0.1 FDIAL=127.0.0.1 ;;
bridge | dnat | hosts | channels)
	if [ "$(id -u)" != 0 ] || ! command -v nft >/dev/null; then
		echo "skip: real programs across namespaces need root and nft"
		exit 0
	fi
	SRV=(ip netns exec dsockAs) CLI=(ip netns exec dsockAc) FRONT=(ip netns exec dsockAf)
	LISTEN=10.96.0.3 LISTEN6=fd96::3 FLISTEN=10.96.0.4
	if [ "$PLACE" != dnat ]; then
		DIAL=10.96.0.3 DIAL6=fd96::3 FDIAL=10.96.0.4
	else
		DIAL=10.96.100.3 DIAL6=fd96:100::3 FDIAL=10.96.100.4
	fi
	export DSOCK_BPF_PROOF=1 ;;
*) echo "unknown place $PLACE"; exit 2 ;;
esac
# HOSTS: the hosts' names (c client, s server, f front), each with its
# daemon's settings (host_env H)
HOSTS=() HOSTLIKE=
[ "$PLACE" = hosts ] || [ "$PLACE" = channels ] && HOSTLIKE=1
[ "$PLACE" = channels ] && export DSOCK_TRANSPORTS=socketpair
host_env() { echo DSOCK_SOCKET="$T/$1/d.sock" DSOCK_HOST_KEY="$T/$1/host.key" DSOCK_HOSTS_ALLOW="$T/$1/allow"; }
if [ -n "$HOSTLIKE" ]; then
	HOSTS=(c s f)
	for h in "${HOSTS[@]}"; do
		mkdir -p "$T/$h"
		env $(host_env "$h") "$BUILD/bin/dsockd" --fingerprint >"$T/$h/fp" || { echo "host $h: no key"; exit 1; }
	done
	for h in "${HOSTS[@]}"; do
		for o in "${HOSTS[@]}"; do [ "$o" = "$h" ] || printf '%s %s\n' "$(cat "$T/$o/fp")" "$o"; done >"$T/$h/allow"
	done
	SRV=(ip netns exec dsockAs env $(host_env s)) CLI=(ip netns exec dsockAc env $(host_env c))
	FRONT=(ip netns exec dsockAf env $(host_env f))
	export DSOCK_SOCKET="$T/c/d.sock"
fi
# what a check that asks for shared memory says it saw
CARRIED="on shared memory"
[ "$PLACE" = hosts ] && CARRIED="proven between hosts"
[ "$PLACE" = channels ] && CARRIED="on channels between hosts"

cleanup() {
	# (postgres: an immediate shutdown; it outlives a runuser killed)
	[ -f "$T/pg/data/postmaster.pid" ] && kill -QUIT "$(head -1 "$T/pg/data/postmaster.pid")" 2>/dev/null
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	[ -f "$T/nginx.pid" ] && kill "$(cat "$T/nginx.pid")" 2>/dev/null
	sleep 0.3
	{ for p in "${PIDS[@]}"; do kill -9 "$p"; done; wait "${PIDS[@]}"; } 2>/dev/null
	stop_proving_daemon "$DSOCK"
	for h in "${HOSTS[@]}"; do DSOCK_SOCKET="$T/$h/d.sock" stop_proving_daemon "$DSOCK"; done
	[ "$PLACE" = loop ] || topo_down "${NETNS[@]}"
	rm -rf "$T"
}
trap cleanup EXIT
if [ "$PLACE" != loop ]; then
	topo_up "${NETNS[@]::1}" 10.96 fd96 "${NETNS[@]:1}" || { echo "cannot build the namespaces"; exit 1; }
fi

ok()   { echo "ok   $1"; PASS=$((PASS + 1)); }
bad()  { echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | tail -15; FAIL=$((FAIL + 1)); }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# wait_port PORT [front]: waits for a listener in the server's (or the
# front's) namespace without connecting to it (iperf3 -1 serves one client)
wait_port() {
	local pre=("${SRV[@]}")
	[ "${2:-}" = front ] && pre=("${FRONT[@]}")
	for _ in $(seq 100); do "${pre[@]}" ss -ltnH "sport = :$1" | grep -q . && return 0; sleep 0.1; done
	return 1
}
# registered COMM: the daemon has seen a process of that name under dsock
# (live, or among the recently exited)
registered() {
	local h s socks=("$DSOCK_SOCKET")
	for h in "${HOSTS[@]}"; do socks+=("$T/$h/d.sock"); done
	for s in "${socks[@]}"; do
		DSOCK_SOCKET=$s "$DSOCK" stat --raw 2>/dev/null | grep -Eq "^(proc|gone) .*comm=$1( |$)" && return 0
	done
	return 1
}
need() { command -v "$1" >/dev/null || { bad "$1 is not installed (run scripts/install-test-deps.sh)"; return 1; }; }
# bg CMD...: a server under dsock, in the background, in the server's
# namespace (bg_front: the front's); cli CMD...: a client, in the client's
bg() { "${SRV[@]}" "$DSOCK" run -- "$@" >"$T/bg.$$.$RANDOM.log" 2>&1 & PIDS+=($!); }
bg_front() { "${FRONT[@]}" "$DSOCK" run -- "$@" >"$T/bg.$$.$RANDOM.log" 2>&1 & PIDS+=($!); }
cli() { "${CLI[@]}" "$DSOCK" run -- "$@"; }
# other_host: the connections the client's host's daemon has proven
# between hosts so far
other_host() { "$DSOCK" stat --raw 2>/dev/null | sed -n 's/.* other_host=\([0-9]*\).*/\1/p' | head -1; }
# run NAME CMD...: runs CMD as a client under dsock; its library reports at exit
# how many of its connections moved bytes through shared memory (DSOCK_FASTPATH_REPORT)
run() {
	local n=$1
	shift
	[ "$PLACE" = hosts ] && other_host >"$T/oh.$n"
	DSOCK_FASTPATH_REPORT="$T/fp.$n" "${CLI[@]}" "$DSOCK" run -- "$@"
}
# on_shm NAME: connections of the programs run as NAME that used the rings
# (hosts: that the client's daemon proved between hosts since)
on_shm() {
	if [ "$PLACE" = hosts ]; then
		local d=$(($(other_host) - $(cat "$T/oh.$1" 2>/dev/null || echo 0)))
		echo "$d"
		[ "$d" -gt 0 ]
		return
	fi
	[ -s "$T/fp.$1" ] && awk '{ s += $2 } END { print s; exit !(s > 0) }' "$T/fp.$1"
}

# (hosts: each daemon in its host's namespace, not through `ip netns exec`,
# whose fresh /sys hides the cgroup mount the BPF programs attach at; the
# client's first, so that it attaches them and the others read them)
for h in "${HOSTS[@]}"; do
	nsenter --net="/run/netns/dsockA$h" env $(host_env "$h") DSOCK_BPF_PROOF=1 "$DSOCK" run -- true ||
		{ echo "host $h: its daemon did not start"; exit 1; }
done
"$DSOCK" run -- true || { echo "cannot start dsock"; exit 1; }
if [ "$PLACE" != loop ] && ! grep -q "kernel-recorded proof on" "$DSOCK_SOCKET.log" 2>/dev/null; then
	echo "skip: the daemon did not attach its BPF programs: $(tail -c 300 "$DSOCK_SOCKET.log" 2>/dev/null)"
	exit 0
fi
echo "--- $PLACE: servers listen on $LISTEN, $LISTEN6; clients dial $DIAL, $DIAL6"

# ---- sockperf ---------------------------------------------------------------
if need sockperf; then
	for proto in tcp udp; do
		P=$(free_port)
		flag=$([ $proto = tcp ] && echo --tcp)
		bg sockperf server $flag -i "$LISTEN" -p "$P"
		sleep 0.5
		if run "sp$proto" sockperf ping-pong $flag -i "$DIAL" -p "$P" -t 2 -m 64 --mps 5000000 --data-integrity \
			>"$T/sp.$proto" 2>&1 && grep -q "Summary: Latency" "$T/sp.$proto" && ! grep -qi "integrity.*fail\|data corruption" "$T/sp.$proto" \
			&& registered sockperf && { [ $proto = udp ] || on_shm "sp$proto" >/dev/null; }; then
			ok "sockperf $proto ping-pong --data-integrity ($(grep -o 'Summary: Latency is [0-9.]* usec' "$T/sp.$proto")$([ $proto = tcp ] && echo ", $CARRIED"))"
		else
			bad "sockperf $proto ping-pong" "$T/sp.$proto"
		fi
		if run "st$proto" sockperf throughput $flag -i "$DIAL" -p "$P" -t 2 -m 1024 \
			>"$T/st.$proto" 2>&1 && grep -q "Summary: Message Rate" "$T/st.$proto" \
			&& { [ $proto = udp ] || on_shm "st$proto" >/dev/null; }; then
			ok "sockperf $proto throughput ($(grep -o 'Message Rate is [0-9]* \[msg/sec\]' "$T/st.$proto"))"
		else
			bad "sockperf $proto throughput" "$T/st.$proto"
		fi
	done
fi

# ---- redis --------------------------------------------------------------------
if need redis-server && need redis-cli && need redis-benchmark; then
	P=$(free_port)
	bg redis-server --port "$P" --bind "$LISTEN" --protected-mode no --save "" --appendonly no --dir "$T"
	if wait_port "$P"; then
		head -c 100000 /dev/urandom | base64 -w0 >"$T/val"
		cli redis-cli -h "$DIAL" -p "$P" -x set big <"$T/val" >"$T/rc" 2>&1
		cli redis-cli -h "$DIAL" -p "$P" --raw get big 2>>"$T/rc" | head -c -1 >"$T/got"
		if cmp -s "$T/val" "$T/got" && registered redis-server && registered redis-cli; then
			ok "redis-cli set/get 133 KB value byte-exact"
		else
			bad "redis-cli set/get" "$T/rc"
		fi
		if run redisb redis-benchmark -h "$DIAL" -p "$P" -n 20000 -c 10 -t get,set -q >"$T/rb" 2>&1 \
			&& [ "$(grep -c 'requests per second' "$T/rb")" = 2 ] && registered redis-benchmark && on_shm redisb >/dev/null; then
			ok "redis-benchmark get,set ($(tr '\r' '\n' <"$T/rb" | grep -o 'GET: [0-9.]* requests per second'))"
		else
			bad "redis-benchmark" "$T/rb"
		fi
	else
		bad "redis-server did not start"
	fi
fi

# ---- nginx (+ wrk, curl, haproxy) ---------------------------------------------
if need nginx && need curl && need wrk; then
	P=$(free_port)
	mkdir -p "$T/www" "$T/logs"
	head -c $((32 << 20)) /dev/urandom >"$T/www/big.bin"
	printf 'hello from nginx\n' >"$T/www/small.txt"
	chmod -R a+rX "$T/www"
	cat >"$T/nginx.conf" <<CONF
worker_processes 2;
pid $T/nginx.pid;
error_log $T/logs/error.log;
events { worker_connections 1024; }
http {
	access_log off;
	sendfile on;
	client_body_temp_path $T/logs; proxy_temp_path $T/logs; fastcgi_temp_path $T/logs;
	uwsgi_temp_path $T/logs; scgi_temp_path $T/logs;
	server { listen $LISTEN:$P; root $T/www; }
}
CONF
	"${SRV[@]}" "$DSOCK" run -- nginx -c "$T/nginx.conf" -p "$T" >"$T/nginx.out" 2>&1
	if wait_port "$P"; then
		run curl curl -s -o "$T/big.got" "http://$DIAL:$P/big.bin" 2>"$T/curl.err"
		# one request on a fresh connection: the pairing may land after the
		# last byte, so the rings are reported here, not required
		if cmp -s "$T/www/big.bin" "$T/big.got" && registered nginx && registered curl; then
			ok "curl 32 MiB from nginx (sendfile) byte-exact ($(sha256sum <"$T/big.got" | cut -c1-12), $(on_shm curl >/dev/null && echo "$CARRIED" || echo "on the kernel"))"
		else
			bad "curl large file from nginx" "$T/curl.err"
		fi
		run wrk wrk -t 2 -c 8 -d 2s "http://$DIAL:$P/small.txt" >"$T/wrk" 2>&1
		if grep -q "Requests/sec" "$T/wrk" && ! grep -q "Socket errors\|Non-2xx" "$T/wrk" && registered wrk \
			&& on_shm wrk >/dev/null; then
			ok "wrk against nginx, no errors ($(grep Requests/sec "$T/wrk" | tr -s ' '))"
		else
			bad "wrk against nginx" "$T/wrk"
		fi
		if need haproxy; then
			H=$(free_port)
			cat >"$T/haproxy.cfg" <<CONF
global
	maxconn 256
defaults
	mode http
	timeout connect 5s
	timeout client 30s
	timeout server 30s
frontend fe
	bind $FLISTEN:$H
	default_backend be
backend be
	server web $DIAL:$P
CONF
			bg_front haproxy -f "$T/haproxy.cfg"
			if wait_port "$H" front; then
				run curlhap curl -s -o "$T/big.hap" "http://$FDIAL:$H/big.bin" 2>"$T/hap.err"
				if cmp -s "$T/www/big.bin" "$T/big.hap" && registered haproxy; then
					ok "curl 32 MiB through haproxy -> nginx byte-exact ($(on_shm curlhap >/dev/null && echo "$CARRIED" || echo "on the kernel"))"
				else
					bad "haproxy in front of nginx" "$T/hap.err"
				fi
				cli wrk -t 1 -c 4 -d 2s "http://$FDIAL:$H/small.txt" >"$T/wrk.hap" 2>&1
				if grep -q "Requests/sec" "$T/wrk.hap" && ! grep -q "Socket errors\|Non-2xx" "$T/wrk.hap"; then
					ok "wrk through haproxy -> nginx, no errors"
				else
					bad "wrk through haproxy" "$T/wrk.hap"
				fi
			else
				bad "haproxy did not start"
			fi
		fi
	else
		bad "nginx did not start" "$T/nginx.out"
	fi
fi

# ---- iperf3 --------------------------------------------------------------------
if need iperf3; then
	P=$(free_port)
	bg iperf3 -s -1 -p "$P" -B "$LISTEN"
	wait_port "$P"
	if run iperf iperf3 -c "$DIAL" -p "$P" -t 2 -P 2 >"$T/iperf" 2>&1 && grep -q "receiver" "$T/iperf" \
		&& registered iperf3 && on_shm iperf >/dev/null; then
		ok "iperf3 2 streams ($(grep SUM.*receiver "$T/iperf" | grep -o '[0-9.]* [GM]bits/sec'))"
	else
		bad "iperf3" "$T/iperf"
	fi
fi

# ---- Python socket and asyncio echo ---------------------------------------------
# Each echo program takes a role: both (its own server and client, in one
# process), serve (a server on ADDR PORT that serves every client) or
# client (a client of ADDR PORT); across namespaces the server and the
# client run apart (serve_and_run).
PY_ECHO='
import asyncio, os, socket, sys, threading
mode, role, addr, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
data = os.urandom(4 << 20)
if mode == "threads":
    def serve(c):
        while True:
            b = c.recv(65536)
            if not b: break
            c.sendall(b)
        c.close()
    if role != "client":
        l = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        l.bind((addr, port)); l.listen()
        if role == "serve":
            while True:
                threading.Thread(target=serve, args=(l.accept()[0],), daemon=True).start()
        threading.Thread(target=lambda: serve(l.accept()[0]), daemon=True).start()
        port = l.getsockname()[1]
    s = socket.create_connection((addr, port))
    got = bytearray()
    def reader():
        while len(got) < len(data):
            b = s.recv(65536)
            if not b: break
            got.extend(b)
    t = threading.Thread(target=reader); t.start()
    s.sendall(data); t.join(); s.close()
    print("ok" if bytes(got) == data else "MISMATCH")
else:
    # an echo conversation (200 messages of 1 B to 64 KiB, each answered
    # before the next), then the 4 MiB in one write and the EOF
    async def handle(r, w):
        while b := await r.read(65536):
            w.write(b); await w.drain()
        w.close()
    async def main():
        global port
        if role != "client":
            srv = await asyncio.start_server(handle, addr, port, reuse_address=True)
            if role == "serve":
                await srv.serve_forever()
            port = srv.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection(addr, port)
        ok = True
        for i in range(200):
            msg = data[i * 20000:i * 20000 + 1 + (i * 7919) % 65536]
            w.write(msg); await w.drain()
            ok = ok and await r.readexactly(len(msg)) == msg
        async def send():
            w.write(data); await w.drain(); w.write_eof()
        t = asyncio.create_task(send())
        got = b""
        while len(got) < len(data):
            b = await r.read(1 << 20)
            if not b: break
            got += b
        await t
        print("ok" if ok and got == data else "MISMATCH")
    asyncio.run(main())
'
# serve_and_run NAME V6 CMD...: CMD both (loopback), or CMD serve in the
# server's namespace and CMD client in the client's; V6=6: over IPv6.
# The client's library reports as NAME; its status is the result.
serve_and_run() {
	local name=$1 v6=$2 P
	shift 2
	local listen=$LISTEN dial=$DIAL
	[ "$v6" = 6 ] && listen=$LISTEN6 dial=$DIAL6
	if [ "$PLACE" = loop ]; then
		run "$name" "$@" both "$listen" 0
		return
	fi
	P=$(free_port)
	bg "$@" serve "$listen" "$P"
	wait_port "$P" || { echo "the server did not start"; return 1; }
	run "$name" "$@" client "$dial" "$P"
}
for mode in threads asyncio; do
	# the threads case checks concurrency, not speed: its 4 MiB burst may be
	# over on the kernel before the pairing lands, so the rings are
	# required for asyncio only, whose conversation pairs first (its burst
	# alone may finish on the kernel too)
	if serve_and_run "py$mode" "$([ $mode = threads ] && echo 6)" python3 -c "$PY_ECHO" "$mode" >"$T/py.$mode" 2>&1 \
		&& grep -qx ok "$T/py.$mode" && { [ "$mode" = threads ] || on_shm "py$mode" >/dev/null; }; then
		ok "python $mode echo byte-exact, IPv$([ $mode = threads ] && echo 6 || echo 4) ($(on_shm "py$mode" >/dev/null && echo "$CARRIED" || echo "on the kernel"))"
	else
		bad "python $mode echo" "$T/py.$mode"
	fi
done

# ---- Node.js net echo, with and without io_uring --------------------------------
# The same conversation as Python's asyncio one.  With UV_USE_IO_URING=1,
# libuv (1.45 and later) sets up an io_uring through syscall() before any
# connection: the kernel then carries the process's connections (reason
# io-uring), byte-exact, and none of them uses the rings.
NODE_ECHO='
const net = require("net"), crypto = require("crypto");
const [role, addr, port] = [process.argv[1], process.argv[2], Number(process.argv[3])];
const data = crypto.randomBytes(4 << 20);
let srv = null;
if (role === "client") client(port);
else {
  srv = net.createServer((c) => c.pipe(c));
  srv.listen(port, addr, () => { if (role === "both") client(srv.address().port); });
}
async function client(port) {
  const s = net.connect(port, addr);
  await new Promise((r) => s.once("connect", r));
  let buf = Buffer.alloc(0), want = 0, wake = null;
  s.on("data", (b) => {
    buf = Buffer.concat([buf, b]);
    if (wake && buf.length >= want) { const w = wake; wake = null; w(); }
  });
  const take = (n) => new Promise((r) => { want = n; if (buf.length >= n) r(); else wake = r; })
    .then(() => { const out = buf.subarray(0, n); buf = buf.subarray(n); return out; });
  let ok = true;
  for (let i = 0; i < 200; i++) {
    const msg = data.subarray(i * 20000, i * 20000 + 1 + ((i * 7919) % 65536));
    s.write(msg);
    ok = ok && (await take(msg.length)).equals(msg);
  }
  s.write(data);
  ok = ok && (await take(data.length)).equals(data);
  console.log(ok ? "ok" : "MISMATCH");
  s.end();
  if (srv) srv.close();
}
'
if need node; then
	# (libuv before 1.45 has no io_uring: both runs then use the rings)
	uv_ring=$(node -e 'const [a, b] = process.versions.uv.split(".").map(Number); console.log(a > 1 || b >= 45 ? 1 : 0)')
	for uring in 0 1; do
		want_shm=$([ "$uring" = 1 ] && [ "$uv_ring" = 1 ] && echo 0 || echo 1)
		# (channels: the conversation may be over on the kernel before
		# the daemons' set-up of its channel, several round trips
		# between them, lands: carried or not, byte-exact)
		[ "$PLACE" = channels ] && [ "$want_shm" = 1 ] && want_shm=any
		if UV_USE_IO_URING=$uring serve_and_run "node$uring" 4 node -e "$NODE_ECHO" >"$T/node.$uring" 2>&1 \
			&& grep -qx ok "$T/node.$uring" \
			&& case $want_shm in 1) on_shm "node$uring" >/dev/null ;; 0) ! on_shm "node$uring" >/dev/null ;; esac; then
			ok "node.js net echo byte-exact, UV_USE_IO_URING=$uring ($(if on_shm "node$uring" >/dev/null; then
				echo "$CARRIED"; elif [ "$want_shm" = 0 ]; then echo "on the kernel: io_uring"; else echo "on the kernel"; fi))"
		else
			bad "node.js net echo, UV_USE_IO_URING=$uring" "$T/node.$uring"
		fi
	done
fi

# ---- memcached ---------------------------------------------------------------------
# A 600 KB value stored and fetched with libmemcached's memccp / memccat, then
# memcaslap's mixed load (its connections must use the rings).
if need memcached && need memccp && need memccat && need memcaslap; then
	P=$(free_port)
	bg memcached -u "$(id -un)" -l "$LISTEN" -p "$P" -U 0 -m 64 -I 2m
	if wait_port "$P"; then
		mkdir -p "$T/mc"
		head -c 600000 /dev/urandom >"$T/mc/blob"
		cli memccp --servers="$DIAL:$P" "$T/mc/blob" >"$T/mc.err" 2>&1
		# (memccat ends the value with a newline)
		cli memccat --servers="$DIAL:$P" blob 2>>"$T/mc.err" | head -c -1 >"$T/mc/got"
		if cmp -s "$T/mc/blob" "$T/mc/got" && registered memcached; then
			ok "memccp/memccat 600 KB value byte-exact"
		else
			bad "memccp/memccat" "$T/mc.err"
		fi
		if run mcslap memcaslap -s "$DIAL:$P" -T 1 -c 16 -t 2s >"$T/mcslap" 2>&1 \
			&& grep -q "TPS:" "$T/mcslap" && on_shm mcslap >/dev/null; then
			ok "memcaslap 16 connections ($(grep -o 'TPS: [0-9]*' "$T/mcslap" | tail -1), $CARRIED)"
		else
			bad "memcaslap" "$T/mcslap"
		fi
	else
		bad "memcached did not start"
	fi
fi

# ---- PostgreSQL --------------------------------------------------------------------
# The postmaster accepts each connection and forks a backend that serves it:
# the pairing is made by the backend once the postmaster closed its copy.
# 2 MB of text through COPY and back, byte-exact, then pgbench's read-only
# load, whose connections must use the rings.  PostgreSQL refuses to run as
# root, so as root it runs as the postgres user, with a daemon of its own
# (across namespaces with the test's proving daemon, which serves every
# user).
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
if [ -z "$PGBIN" ]; then
	bad "PostgreSQL is not installed (run scripts/install-test-deps.sh)"
elif need pgbench && need psql; then
	PGD="$T/pg"
	mkdir -p "$PGD"
	AS=()
	if [ "$(id -u)" = 0 ]; then
		chown postgres "$PGD"
		AS=(runuser -u postgres --)
	fi
	PGSOCK=$PGD/dsockd.sock
	[ "$PLACE" = loop ] || PGSOCK=$DSOCK_SOCKET
	# pg: as postgres in the client's namespace; pg_srv: in the server's
	# (hosts: each with its host's daemon, as CLI and SRV say)
	if [ -n "$HOSTLIKE" ]; then
		pg() { "${CLI[@]}" "${AS[@]}" env "$@"; }
		pg_srv() { "${SRV[@]}" "${AS[@]}" env "$@"; }
	else
		pg() { "${CLI[@]}" "${AS[@]}" env DSOCK_SOCKET="$PGSOCK" "$@"; }
		pg_srv() { "${SRV[@]}" "${AS[@]}" env DSOCK_SOCKET="$PGSOCK" "$@"; }
	fi
	P=$(free_port)
	pg_srv "$PGBIN/initdb" -D "$PGD/data" -A trust -U postgres >"$T/pg.init" 2>&1
	echo "host all all 0.0.0.0/0 trust" >>"$PGD/data/pg_hba.conf"
	pg_srv "$DSOCK" run -- "$PGBIN/postgres" -D "$PGD/data" -h "$LISTEN" -p "$P" -k "$PGD" -c fsync=off \
		>"$T/pg.log" 2>&1 &
	PIDS+=($!)
	if wait_port "$P"; then
		for _ in $(seq 50); do pg "$PGBIN/pg_isready" -q -h "$DIAL" -p "$P" && break; sleep 0.1; done
		Q=(-h "$DIAL" -p "$P" -U postgres -X -q postgres)
		head -c 1500000 /dev/urandom | base64 >"$PGD/in.txt"
		chmod a+r "$PGD/in.txt"
		pg "$DSOCK" run -- psql "${Q[@]}" -c "create table t (id serial, v text)" >"$T/pg.out" 2>&1
		pg "$DSOCK" run -- psql "${Q[@]}" -c "\\copy t (v) from '$PGD/in.txt'" >>"$T/pg.out" 2>&1
		other_host >"$T/oh.psql"
		pg DSOCK_FASTPATH_REPORT="$PGD/fp.psql" "$DSOCK" run -- psql "${Q[@]}" -At -c "select v from t order by id" \
			>"$PGD/got.txt" 2>>"$T/pg.out"
		if cmp -s "$PGD/in.txt" "$PGD/got.txt"; then
			ok "psql COPY 2 MB in and out byte-exact ($({ [ -s "$PGD/fp.psql" ] || { [ "$PLACE" = hosts ] && on_shm psql >/dev/null; }; } && echo "$CARRIED" || echo "on the kernel"))"
		else
			bad "psql COPY in and out" "$T/pg.out"
		fi
		pg "$DSOCK" run -- pgbench "${Q[@]::6}" -i -s 1 postgres >"$T/pgbench.init" 2>&1
		other_host >"$T/oh.pgbench"
		pg DSOCK_FASTPATH_REPORT="$PGD/fp.bench" "$DSOCK" run -- pgbench "${Q[@]::6}" -c 4 -j 2 -T 2 -S postgres \
			>"$T/pgbench" 2>&1
		if grep -q "number of failed transactions: 0 " "$T/pgbench" && grep -q "^tps" "$T/pgbench" \
			&& if [ "$PLACE" = hosts ]; then [ "$(on_shm pgbench)" -ge 4 ];
			# (channels: the socketpair transport offers a connection
			# when it is accepted, and postmaster forks its backend
			# with the answer pending: the kernel keeps it)
			elif [ "$PLACE" = channels ]; then true; else
				[ -s "$PGD/fp.bench" ] && awk '{ s += $2 } END { exit !(s >= 4) }' "$PGD/fp.bench"; fi; then
			ok "pgbench 4 clients, read-only ($(grep -o 'tps = [0-9]*' "$T/pgbench"), $(if [ "$PLACE" = hosts ]; then
				echo "$(on_shm pgbench) connections $CARRIED"; else
				n=$(awk '{ s += $2 } END { print s + 0 }' "$PGD/fp.bench" 2>/dev/null)
				if [ "${n:-0}" -gt 0 ]; then echo "$n connections $CARRIED"; else echo "on the kernel"; fi; fi))"
		else
			bad "pgbench" "$T/pgbench"
		fi
	else
		bad "postgres did not start" "$T/pg.log"
	fi
	pg_srv "$PGBIN/pg_ctl" -D "$PGD/data" -m fast -w stop >/dev/null 2>&1
	[ "$PLACE" = loop ] && pg "$DSOCK" stop >/dev/null 2>&1
fi

# ---- Java -------------------------------------------------------------------------
# A NIO Selector echo server (epoll) and a blocking client with a reader
# thread: the echo conversation of the others, then 4 MiB in one write.
JAVA_ECHO='import java.io.*;
import java.net.*;
import java.nio.ByteBuffer;
import java.nio.channels.*;
import java.util.*;

// A NIO Selector echo server (epoll underneath) and a blocking client
// with a reader thread: an echo conversation, then 4 MiB in one write.
public class EchoTest {
    // serves on sel until the first client leaves (forever: every client)
    static void serve(Selector sel, ServerSocketChannel srv, boolean forever) {
        try {
            ByteBuffer buf = ByteBuffer.allocate(65536);
            while (true) {
                sel.select();
                Iterator<SelectionKey> it = sel.selectedKeys().iterator();
                while (it.hasNext()) {
                    SelectionKey k = it.next();
                    it.remove();
                    if (k.isAcceptable()) {
                        SocketChannel c = srv.accept();
                        if (c == null) continue;
                        c.configureBlocking(false);
                        c.register(sel, SelectionKey.OP_READ);
                    } else if (k.isReadable()) {
                        SocketChannel c = (SocketChannel) k.channel();
                        buf.clear();
                        int n = c.read(buf);
                        if (n < 0) { c.close(); if (forever) continue; return; }
                        buf.flip();
                        while (buf.hasRemaining()) {
                            if (c.write(buf) == 0) Thread.onSpinWait();
                        }
                    }
                }
            }
        } catch (IOException e) { e.printStackTrace(); }
    }

    public static void main(String[] a) throws Exception {
        String role = a[0], addr = a[1];
        int port = Integer.parseInt(a[2]);
        if (!role.equals("client")) {
            Selector sel = Selector.open();
            ServerSocketChannel srv = ServerSocketChannel.open();
            srv.bind(new InetSocketAddress(addr, port));
            srv.configureBlocking(false);
            srv.register(sel, SelectionKey.OP_ACCEPT);
            port = ((InetSocketAddress) srv.getLocalAddress()).getPort();
            if (role.equals("serve")) {
                serve(sel, srv, true);
                return;
            }
            Thread server = new Thread(() -> serve(sel, srv, false));
            server.setDaemon(true);
            server.start();
        }
        byte[] data = new byte[4 << 20];
        new Random(7).nextBytes(data);
        Socket s = new Socket(addr, port);
        s.setTcpNoDelay(true);
        OutputStream out = s.getOutputStream();
        DataInputStream in = new DataInputStream(s.getInputStream());
        boolean ok = true;
        for (int i = 0; i < 200; i++) {
            int off = i * 20000, len = 1 + (i * 7919) % 65536;
            out.write(data, off, len);
            byte[] got = new byte[len];
            in.readFully(got);
            ok &= Arrays.equals(got, 0, len, data, off, off + len);
        }
        byte[] all = new byte[data.length];
        Thread reader = new Thread(() -> {
            try { in.readFully(all); } catch (IOException e) { e.printStackTrace(); }
        });
        reader.start();
        out.write(data);
        reader.join();
        ok &= Arrays.equals(all, data);
        s.shutdownOutput();
        System.out.println(ok && in.read() == -1 ? "ok" : "MISMATCH");
        s.close();
    }
}'
if need java; then
	mkdir -p "$T/java"
	printf '%s\n' "$JAVA_ECHO" >"$T/java/EchoTest.java"
	if serve_and_run java 4 java "$T/java/EchoTest.java" >"$T/java.out" 2>&1 && grep -qx ok "$T/java.out" \
		&& on_shm java >/dev/null; then
		ok "java NIO echo byte-exact ($CARRIED)"
	else
		bad "java NIO echo" "$T/java.out"
	fi
fi

echo "apps: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]

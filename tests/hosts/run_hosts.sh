#!/usr/bin/env bash
# Hosts simulated on one machine (root only): two network namespaces,
# host a and host b, joined through a bridge in a third (the switch), each
# with a daemon of its own (its own control socket; no proof by BPF) and
# nothing shared between them but the network.  dsock programs on two
# hosts, and a dsock program against a plain one on the other host, talk
# over the kernel: every check counts the bytes on host b's interface to
# prove they crossed the veth, and asks each host's daemon which path the
# connection took.
#   sockperf TCP and UDP ping-pong, both ends under dsock;
#   a 4 MiB Python transfer, byte-exact, both ways between dsock programs;
#   redis: a plain redis-cli against a dsock server, and a dsock redis-cli
#   against a plain server.
# Usage: tests/hosts/run_hosts.sh [BUILD_DIR]
# Closing line: "hosts: N passed, N failed".
set -u
BUILD=$(cd "${1:-build}" && pwd)
DSOCK="$BUILD/bin/dsock"
if [ "$(id -u)" != 0 ]; then
	echo "skip: hosts in namespaces need root"
	echo "hosts: 0 passed, 0 failed"
	exit 0
fi
T=$(mktemp -d /tmp/dsock-hosts-XXXXXX)
chmod 755 "$T"
PASS=0 FAIL=0
PIDS=()
. "$(dirname "$0")/../lib/topo.sh"
NETNS=(dsockHs dsockHa dsockHb)
A=10.95.0.2 B=10.95.0.3

cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	sleep 0.2
	{ for p in "${PIDS[@]}"; do kill -9 "$p"; done; wait "${PIDS[@]}"; } 2>/dev/null
	for h in a b; do DSOCK_SOCKET="$T/$h/d.sock" "$DSOCK" stop >/dev/null 2>&1; done
	topo_down "${NETNS[@]}"
	rm -rf "$T"
}
trap cleanup EXIT
topo_up dsockHs 10.95 fd95 dsockHa dsockHb || { echo "cannot build the namespaces"; exit 1; }

ok()  { echo "ok   $1"; PASS=$((PASS + 1)); }
bad() { echo "FAIL $1"; [ -n "${2:-}" ] && sed 's/^/     /' "$2" | tail -15; FAIL=$((FAIL + 1)); }
# on H CMD...: CMD on host H, with that host's daemon; dsock_on H CMD...:
# under dsock there
on() {
	local h=$1
	shift
	ip netns exec "dsockH$h" env DSOCK_SOCKET="$T/$h/d.sock" DSOCK_BPF_PROOF=0 "$@"
}
dsock_on() {
	local h=$1
	shift
	on "$h" "$DSOCK" run -- "$@"
}
rx_b() { on b cat /sys/class/net/eth0/statistics/rx_bytes; }
tx_b() { on b cat /sys/class/net/eth0/statistics/tx_bytes; }
# paths H PROG: the path column of PROG's connected sockets in host H's
# `dsock stat` (one word each)
paths() { on "$1" "$DSOCK" stat | awk -v p="($2)" '$1 == "process" { cur = $3 } cur == p && $3 == "connected" { print $6 "(" $7 ")" }' | sort | uniq -c | tr -s ' ' | tr '\n' ';'; }
wait_port() {
	for _ in $(seq 100); do on b ss -ltnH "sport = :$1" | grep -q . && return 0; sleep 0.1; done
	return 1
}

for h in a b; do
	mkdir -p "$T/$h"
	chmod 755 "$T/$h"
	dsock_on "$h" true || { echo "host $h: its daemon did not start"; exit 1; }
done

# 1. sockperf TCP ping-pong, both ends under dsock, on two hosts
dsock_on b sockperf server --tcp -i "$B" -p 11111 >"$T/sps.log" 2>&1 &
PIDS+=($!)
wait_port 11111
rx0=$(rx_b)
dsock_on a sockperf ping-pong --tcp --mps 5000000 -i "$B" -p 11111 -m 14 -t 3 >"$T/spc.log" 2>&1 &
cli=$!
sleep 1.5
pa=$(paths a sockperf) pb=$(paths b sockperf)
wait "$cli"
rx1=$(rx_b)
got=$(sed -n 's/.*ReceivedMessages=\([0-9]*\).*/\1/p' "$T/spc.log" | tail -1)
p50=$(sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' "$T/spc.log")
if [ -n "$got" ] && [ "$got" -gt 1000 ] && [ $((rx1 - rx0)) -ge $((got * 14)) ] &&
	[ "${pa#* }" = "${pb#* }" ] && [ "${pa%%(*}" = " 1 kernel" ]; then
	ok "1. sockperf TCP ping-pong between dsock programs on two hosts: $got round trips, p50 $p50 us, $((rx1 - rx0)) bytes into host b's eth0, path a:$pa b:$pb"
else
	bad "1. sockperf TCP ping-pong between hosts (round trips '$got', bytes in $((rx1 - rx0)), paths a:'$pa' b:'$pb')" "$T/spc.log"
fi

# 2. the same over UDP (never carried)
dsock_on b sockperf server -i "$B" -p 11112 >"$T/sus.log" 2>&1 &
PIDS+=($!)
sleep 0.5
rx0=$(rx_b)
dsock_on a sockperf ping-pong --mps 5000000 -i "$B" -p 11112 -m 14 -t 2 >"$T/suc.log" 2>&1
rx1=$(rx_b)
got=$(sed -n 's/.*ReceivedMessages=\([0-9]*\).*/\1/p' "$T/suc.log" | tail -1)
if [ -n "$got" ] && [ "$got" -gt 1000 ] && [ $((rx1 - rx0)) -ge $((got * 14)) ]; then
	ok "2. sockperf UDP ping-pong between hosts: $got round trips, $((rx1 - rx0)) bytes into host b's eth0"
else
	bad "2. sockperf UDP ping-pong between hosts (round trips '$got', bytes in $((rx1 - rx0)))" "$T/suc.log"
fi

# 3. 4 MiB each way, byte-exact, between dsock programs on two hosts
cat >"$T/xfer.py" <<'EOF'
import hashlib, os, socket, sys
role, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
data = bytes((i * 7 + i // 251) & 255 for i in range(4 << 20))
def recv_all(s, n):
    b = bytearray()
    while len(b) < n:
        k = s.recv(min(65536, n - len(b)))
        if not k:
            break
        b += k
    return bytes(b)
if role == "serve":
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, port))
    l.listen(1)
    c, _ = l.accept()
    got = recv_all(c, len(data))
    c.sendall(got)
    c.close()
else:
    c = socket.create_connection((addr, port))
    c.sendall(data)
    back = recv_all(c, len(data))
    print("exact" if back == data else "differs", hashlib.sha256(back).hexdigest()[:16])
EOF
dsock_on b python3 "$T/xfer.py" serve "$B" 11113 &
srv=$!
wait_port 11113
rx0=$(rx_b) tx0=$(tx_b)
out=$(dsock_on a python3 "$T/xfer.py" dial "$B" 11113 2>&1)
wait "$srv"
rx1=$(rx_b) tx1=$(tx_b)
if [ "${out%% *}" = exact ] && [ $((rx1 - rx0)) -ge $((4 << 20)) ] && [ $((tx1 - tx0)) -ge $((4 << 20)) ]; then
	ok "3. 4 MiB each way between dsock programs on two hosts, byte-exact ($((rx1 - rx0)) bytes in, $((tx1 - tx0)) out on host b's eth0)"
else
	bad "3. 4 MiB each way between hosts ('$out', $((rx1 - rx0)) in, $((tx1 - tx0)) out)"
fi

# 4. redis: a plain client against a dsock server, a dsock client against
# a plain server
port=11114
for who in "server" "client"; do
	port=$((port + 1))
	if [ "$who" = server ]; then
		dsock_on b redis-server --bind "$B" --port "$port" --protected-mode no --save "" --appendonly no \
			>"$T/rs.log" 2>&1 &
	else
		on b redis-server --bind "$B" --port "$port" --protected-mode no --save "" --appendonly no >"$T/rs.log" 2>&1 &
	fi
	rs=$!
	wait_port "$port"
	rx0=$(rx_b)
	if [ "$who" = server ]; then
		on a redis-cli -h "$B" -p "$port" set k "from-$who" >/dev/null
		v=$(on a redis-cli -h "$B" -p "$port" get k)
	else
		dsock_on a redis-cli -h "$B" -p "$port" set k "from-$who" >/dev/null
		v=$(dsock_on a redis-cli -h "$B" -p "$port" get k)
	fi
	rx1=$(rx_b)
	kill "$rs"
	wait "$rs" 2>/dev/null
	if [ "$v" = "from-$who" ] && [ $((rx1 - rx0)) -gt 0 ]; then
		ok "4. redis across hosts, dsock on the $who's side only: the value back ($((rx1 - rx0)) bytes into host b's eth0)"
	else
		bad "4. redis across hosts, dsock on the $who's side only: got '$v'" "$T/rs.log"
	fi
done

echo "hosts: $PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]

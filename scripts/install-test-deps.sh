#!/usr/bin/env bash
# Installs what building and testing dsock needs, from Debian packages.
# Needs root (or sudo).  Safe to run again.
set -eu
PKGS="build-essential make gcc clang libclang-rt-dev gdb python3 iproute2 procps
      sockperf iperf3 redis-server redis-tools nginx-light wrk haproxy curl bc linux-perf
      memcached libmemcached-tools postgresql default-jdk-headless libbpf-dev nftables libssl-dev openssl"
SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo
missing=
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
	echo "installing:$missing"
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
# Packaged servers may start themselves; the tests run their own instances.
for svc in nginx redis-server haproxy memcached postgresql; do
	$SUDO systemctl stop "$svc" >/dev/null 2>&1 || $SUDO service "$svc" stop >/dev/null 2>&1 || true
done
echo "test dependencies present"

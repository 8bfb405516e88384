#!/usr/bin/env bash
# libdsock.so must export exactly the names in its version script.
set -eu
lib=${1:-build}/lib/libdsock.so
map=src/lib/libdsock.map
want=$(sed -n '/global:/,/local:/p' "$map" | grep -v 'global:\|local:' | tr ' ;' '\n\n' | grep -v '^$' | sort)
have=$(nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort)
if [ "$want" != "$have" ]; then
	echo "exports differ from $map:"
	diff <(echo "$want") <(echo "$have") || true
	exit 1
fi
echo "exports: $(echo "$have" | wc -l) names, as in $map"

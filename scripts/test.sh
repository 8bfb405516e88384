#!/usr/bin/env bash
# The README's test command: install what the tests need, build, run them.
set -eu
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
exec tests/run.sh build

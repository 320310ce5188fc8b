#!/usr/bin/env bash
# Runs the JDBC client tests: starts a Squadron coordinator (two embedded
# workers, TPC-H sample data) on a free port, runs the Maven tests against
# it with the real Arrow Flight SQL JDBC driver, and stops it.
# Expects the debug binaries built (./test.sh builds them first).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${SQUADRON_BIN_DIR:-${CARGO_TARGET_DIR:-$repo/target}/debug}"

work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

"$bin/squadron-server" --listen 127.0.0.1:0 --demo --demo-scale 0.01 \
    --data-dir "$work/data" > "$work/server.out" 2> "$work/server.err" &
server_pid=$!

port=""
for _ in $(seq 1 300); do
    port="$(sed -n 's#.*listening on grpc://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$work/server.out")"
    [ -n "$port" ] && break
    if ! kill -0 "$server_pid" 2>/dev/null; then
        echo "the server exited:" >&2
        cat "$work/server.err" >&2
        exit 1
    fi
    sleep 0.1
done
if [ -z "$port" ]; then
    echo "the server did not start listening" >&2
    exit 1
fi

cd "$here"
mvn -q -B test -Dsquadron.port="$port"
echo "JDBC tests passed"

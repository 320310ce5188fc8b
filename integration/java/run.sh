#!/usr/bin/env bash
# Runs the JDBC client tests: starts two Squadron coordinators (two
# embedded workers each, TPC-H sample data) on free ports, one plain and one
# with TLS, users and a token issuer; runs the Maven tests against them with
# the real Arrow Flight SQL JDBC driver, and stops them.
# Expects the debug binaries built (./test.sh builds them first).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
bin="${SQUADRON_BIN_DIR:-${CARGO_TARGET_DIR:-$repo/target}/debug}"

work="$(mktemp -d)"
server_pids=()
cleanup() {
    for pid in "${server_pids[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# start_server NAME ARGS...: starts a coordinator and waits for its port,
# left in $started_port; its output goes to $work/NAME.out and .err.
start_server() {
    local name="$1"
    shift
    "$bin/squadron-server" --listen 127.0.0.1:0 --demo --demo-scale 0.01 "$@" \
        > "$work/$name.out" 2> "$work/$name.err" &
    local pid=$!
    server_pids+=("$pid")
    local port=""
    for _ in $(seq 1 300); do
        port="$(sed -n 's#.*listening on grpc[+a-z]*://127\.0\.0\.1:\([0-9]*\).*#\1#p' "$work/$name.out")"
        [ -n "$port" ] && break
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "the $name server exited:" >&2
            cat "$work/$name.err" >&2
            exit 1
        fi
        sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "the $name server did not start listening" >&2
        exit 1
    fi
    started_port="$port"
}

start_server plain --data-dir "$work/data"
port="$started_port"

# A second server with TLS, users and an external token issuer, for the
# driver's encrypted and authenticated paths.
certs="$work/certs"
"$bin/squadron-server" certs generate --out "$certs" > /dev/null
password="jdbc test password"
echo "$password" | "$bin/squadron-server" users add --file "$certs/users.toml" --name alice > /dev/null
head -c 48 /dev/urandom | base64 | tr -d '\n' > "$certs/jwt.secret"
start_server secure --data-dir "$work/secure-data" \
    --tls-cert "$certs/server.pem" --tls-key "$certs/server-key.pem" \
    --cluster-ca "$certs/ca.pem" --cluster-cert "$certs/coordinator.pem" \
    --cluster-key "$certs/coordinator-key.pem" \
    --users "$certs/users.toml" --jwt-hs256-secret-file "$certs/jwt.secret"
tls_port="$started_port"

cd "$here"
mvn -q -B test -Dsquadron.port="$port" -Dsquadron.tls.port="$tls_port" \
    -Dsquadron.tls.ca="$certs/ca.pem" -Dsquadron.tls.password="$password" \
    -Dsquadron.tls.jwt-secret="$certs/jwt.secret"
echo "JDBC tests passed"

#!/usr/bin/env bash
# Runs every Squadron test on a fresh machine: format and lint checks, one
# debug build, the Rust unit and cluster tests, then the client tests in
# integration/ with the real Python drivers (installed into integration/.venv)
# and the Arrow Flight SQL JDBC driver (fetched by Maven).
set -euo pipefail
cd "$(dirname "$0")"

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Every crate depends only on lower layers (docs/architecture.md), and no
# two files of a crate import each other, directly or around a loop.
python3 .ci/crate_layers.py
python3 .ci/import_cycles.py proto/src common/src net/src exec/src planner/src worker/src \
    coordinator/src server/src \
    integration/bench/src integration/cluster/src integration/sqllogictest/src \
    integration/fuzz/src
# Every file and directory the README and docs/ name exists.
python3 .ci/doc_paths.py

echo "== build"
cargo build --workspace --bins --tests --locked
# The README's run command (`cargo run --bin squadron-server`) selects the
# whole workspace, as this build does, so after it the command starts at
# once. (`cargo run -p squadron-server` resolves the dependencies' features
# for that package alone and compiles DataFusion again.)
"${CARGO_TARGET_DIR:-target}/debug/squadron-server" --help > /dev/null

echo "== rust tests"
cargo test --workspace --locked

echo "== DataFusion's sqllogictest corpus, CI subset: single-node vs Squadron"
# The binary the build above made: `cargo run -p squadron-sqllogictest`
# resolves features for that package alone and spent five minutes
# compiling it again.
# Both join modes, each with the tasks' dynamic filters on (the default)
# and off.
"${CARGO_TARGET_DIR:-target}/debug/squadron-slt" --subset ci --check \
    --modes default,partitioned,default-no-filters,partitioned-no-filters

echo "== differential query fuzzer: kept cases, then generated queries in every mode"
# The reduced differences kept in the repository first, then 150 generated
# queries (a fixed seed: the same queries on every run) in all six modes
# with the metamorphic and volatile checks; long runs are a documented
# command (docs/correctness.md).
"${CARGO_TARGET_DIR:-target}/debug/squadron-fuzz" --replay integration/fuzz/cases \
    --seed 1 --queries 150 --check

echo "== python client tests"
venv=integration/.venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install --quiet --disable-pip-version-check -r integration/requirements.txt
# The SQLAlchemy dialect, from the checkout (its dependencies are pinned above).
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps ./integration/sqlalchemy
# Azurite (Azure Blob Storage emulator) for the object store tests, from npm.
if [ ! -x integration/azurite/node_modules/.bin/azurite-blob ]; then
    npm ci --prefix integration/azurite --no-audit --no-fund --silent
fi
# fake-gcs-server (a GCS emulator) for the GCS tests, from the Go module proxy.
if [ ! -x integration/.gcs/fake-gcs-server ]; then
    GOBIN="$PWD/integration/.gcs" go install github.com/fsouza/fake-gcs-server@v1.56.1
fi
# toxiproxy (a TCP proxy adding latency and a bandwidth cap between the
# hosts of the multi-host tests), from the Go module proxy.
if [ ! -x integration/.toxiproxy/server ]; then
    GOBIN="$PWD/integration/.toxiproxy" go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0
fi
# Debian's chromium for the query UI tests (Playwright drives it; its own
# browser download is not reachable from CI).
if ! command -v chromium > /dev/null; then
    apt_get() { if [ "$(id -u)" = 0 ]; then apt-get "$@"; else sudo apt-get "$@"; fi; }
    export DEBIAN_FRONTEND=noninteractive
    apt_get install -y -q chromium > /dev/null || {
        apt_get update -q > /dev/null
        apt_get install -y -q chromium > /dev/null
    }
fi
"$venv/bin/python" -m pytest integration/python -q -p no:cacheprovider

echo "== JDBC client tests"
integration/java/run.sh

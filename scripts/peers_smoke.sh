#!/usr/bin/env bash
# benches/peers (Weir against rust-rdkafka and RocksDB) built and run once with
# tiny sizes, every phase (produce, consume, restore), so that a client or store API it
# uses cannot change under it unnoticed, and a crash or a lost record fails. The figures
# of so small a run mean nothing and are not checked.
#
#   scripts/peers_smoke.sh [WEIR_TESTKIT_BIN]
#
# Needs Debian's librocksdb-dev and libclang-dev (benches/peers/.cargo/config.toml links
# the former through bindgen, so RocksDB is not compiled). Under CI, or when they are
# missing and this runs as root, they are installed with apt-get (apt-get update only if
# the install fails). Missing outside CI without root: the step fails and says so.
#
# A debug build: from a cold benches/peers/target it builds faster than release and a
# 2,000-record run takes well under a second either way (figures in benches/results/peers.md).
# The target dir is benches/peers' own, or CARGO_TARGET_DIR if set.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
PEERS_DIR="$REPO_ROOT/benches/peers"
PACKAGES=(librocksdb-dev libclang-dev)

note() { echo "peers_smoke.sh: $*"; }
fatal() {
    echo "peers_smoke.sh: error: $*" >&2
    exit 1
}

packages_present() {
    local p
    for p in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            return 1
    done
}

if [[ "${CI:-}" == true ]] || { ! packages_present && [[ "$(id -u)" == 0 ]]; }; then
    command -v apt-get >/dev/null || fatal "apt-get not found: install ${PACKAGES[*]} by hand"
    export DEBIAN_FRONTEND=noninteractive
    note "apt-get install -y --no-install-recommends ${PACKAGES[*]}"
    if ! apt-get install -y --no-install-recommends "${PACKAGES[@]}"; then
        note "install failed; apt-get update, then once more"
        apt-get update
        apt-get install -y --no-install-recommends "${PACKAGES[@]}"
    fi
fi
packages_present ||
    fatal "${PACKAGES[*]} not installed (apt-get install ${PACKAGES[*]}, as root)"

testkit="${1:-${WEIR_TESTKIT_BIN:-}}"
[[ -n "$testkit" && -x "$testkit" ]] ||
    fatal "no weir-testkit binary (argument or WEIR_TESTKIT_BIN): '$testkit'"

# From benches/peers: cargo reads .cargo/config.toml (the RocksDB paths) from the working
# directory, not the manifest's. The executable's path from cargo itself, wherever the
# target dir is.
cd "$PEERS_DIR"
peers="$(cargo build --locked --bin peers \
    --message-format=json-render-diagnostics |
    python3 -c 'import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
        print(msg["executable"])' | tail -n1)"
[[ -n "$peers" && -x "$peers" ]] || fatal "cargo build of benches/peers gave no executable"
note "built $peers"

"$peers" --testkit "$testkit" --records 2000 --restore-records 2000 --runs 1 \
    --phases produce,consume,restore

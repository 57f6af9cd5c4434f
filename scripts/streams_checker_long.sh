#!/usr/bin/env bash
# The long run of the streams checker: seeds 0..N in chunks, one
# summary line per chunk, every failing seed's violation printed.
#
#   scripts/streams_checker_long.sh [N=10000] [CHUNK=250] [THREADS=2]
#
# Builds the checker in release first. Each chunk is one test process;
# a failing chunk does not stop the run. Exit status: non-zero if any
# chunk failed. Replay a seed with
#   WEIR_STREAMS_SEED=S cargo test --release -p weir-integration --test streams_checker the_runtime -- --nocapture
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n="${1:-10000}" chunk="${2:-250}" threads="${3:-2}"
bin=$(cargo test --release -p weir-integration --test streams_checker --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m["target"]["name"]=="streams_checker" and m.get("executable"): print(m["executable"])')
[[ -x "$bin" ]] || { echo "no checker binary" >&2; exit 1; }
# A copy, so a rebuild during the run does not swap the binary under it.
tmp=$(mktemp -d) && trap 'rm -rf "$tmp"' EXIT
cp "$bin" "$tmp/checker" && bin="$tmp/checker"
started=$(date +%s) failed=0 schedules=0
for ((a = 0; a < n; a += chunk)); do
    b=$((a + chunk < n ? a + chunk : n))
    out=$(WEIR_STREAMS_SEED="$a..$b" WEIR_STREAMS_THREADS="$threads" "$bin" the_runtime --nocapture 2>&1) || failed=$((failed + 1))
    schedules=$((schedules + b - a))
    echo "seeds $a..$b: $(grep -E '^[0-9]+ schedules in' <<<"$out" || echo 'no summary')"
    grep -E '^seed [0-9]+ \(' <<<"$out" || true
done
echo "$schedules schedules in $(($(date +%s) - started)) s; $failed chunk(s) with failures"
((failed == 0))

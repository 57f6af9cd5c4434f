#!/usr/bin/env bash
# Builds every fuzz target (cargo fuzz, stable toolchain, no sanitizer) and
# runs each for a few seconds from its committed seed corpus. Fails on any
# crash, panic, timeout or out-of-memory. See fuzz/README.md.
#
#   scripts/fuzz_smoke.sh [seconds per target, default 10]
set -euo pipefail
secs="${1:-10}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root/fuzz"
mkdir -p artifacts
lock=(flock /tmp/weir-cargo.lock)
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz missing: cargo install cargo-fuzz" >&2; exit 2; }
start=$(date +%s)
"${lock[@]}" cargo fuzz build --sanitizer none
triple="$(rustc -vV | sed -n 's/^host: //p')"
bin="$root/fuzz/target/$triple/release"
for target in $(cargo fuzz list); do
    work="$(mktemp -d)"
    # The seeds are copied so that what libFuzzer adds stays out of the tree.
    cp "corpus/$target"/seed-* "$work"/ 2>/dev/null || true
    echo "== $target (${secs}s)"
    status=0
    "$bin/$target" "$work" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$root/fuzz/artifacts/$target-" -print_final_stats=1 \
        >"$work.log" 2>&1 || status=$?
    grep -E '^(#[0-9]+[[:space:]]*DONE|stat::number_of_executed_units|==[0-9]+== ERROR|SUMMARY|thread .* panicked)' "$work.log" || true
    if [ "$status" -ne 0 ]; then tail -40 "$work.log" >&2; fi
    rm -rf "$work" "$work.log"
    if [ "$status" -ne 0 ]; then
        echo "fuzz target $target failed (exit $status); artifacts in fuzz/artifacts/" >&2
        exit 1
    fi
done
echo "fuzz smoke: all targets passed in $(( $(date +%s) - start ))s"

#!/usr/bin/env bash
# Checks weir-testkit's fidelity with an independent client: builds the `weir-testkit`
# binary, serves a cluster on a free loopback port, and runs against it:
#   fidelity  probe_tansu.py --strict (confluent-kafka and kafka-python; every codec;
#             read_committed must hide aborts);
#   zombie    probe_zombie.py (a librdkafka transactional producer fenced by a second one
#             with the same transactional.id must get a FATAL _FENCED error, as from Kafka).
#
#   scripts/interop/probe_testkit.sh [PYTHON [PROBE...]]
#
# PYTHON defaults to $WEIR_PYTHON, else the one scripts/pyenv.sh sets up ("" for that
# default when naming probes). PROBE is fidelity or zombie; default: both, in that order.
# Exit status: 0 if every probe passed, 1 if one failed or the testkit could not be started.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/../.." && pwd)"
PY="${1:-${WEIR_PYTHON:-}}"
PROBES=("${@:2}")
((${#PROBES[@]} > 0)) || PROBES=(fidelity zombie)
for probe in "${PROBES[@]}"; do
    [[ "$probe" == fidelity || "$probe" == zombie ]] ||
        { echo "probe_testkit: error: unknown probe '$probe' (fidelity or zombie)" >&2; exit 1; }
done
[[ -n "$PY" ]] || PY="$("$REPO_ROOT/scripts/pyenv.sh")"
READY_TIMEOUT_S=30

say() { echo "probe_testkit: $*" >&2; }
die() {
    echo "probe_testkit: error: $*" >&2
    exit 1
}

work="$(mktemp -d "${TMPDIR:-/tmp}/weir-testkit-probe.XXXXXX")"
pid=""
cleanup() {
    local rc=$?
    if [[ -n "$pid" ]]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true # 143: it died of our SIGTERM, as intended
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT

say "building weir-testkit"
# The artifact list names the executable, wherever CARGO_TARGET_DIR points.
exe="$(cd "$REPO_ROOT" && cargo build -p weir-testkit --bin weir-testkit \
    --message-format=json-render-diagnostics |
    python3 -c 'import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
        print(msg["executable"])' | tail -n1)" || die "cargo build of weir-testkit failed"
[[ -x "$exe" ]] || die "no weir-testkit executable found after the build"

# It prints its bootstrap address as its first stdout line once it is listening.
"$exe" serve --port 0 --brokers 1 --partitions 3 </dev/null >"$work/out" 2>"$work/err" &
pid=$!
deadline=$((SECONDS + READY_TIMEOUT_S))
until (($(wc -l <"$work/out") >= 1)); do
    kill -0 "$pid" 2>/dev/null || {
        cat "$work/err" >&2
        die "weir-testkit exited before printing its address"
    }
    ((SECONDS < deadline)) || die "weir-testkit printed no address within ${READY_TIMEOUT_S}s"
    sleep 0.05 # poll interval of a bounded readiness loop
done
bootstrap="$(head -n1 "$work/out")"
python3 "$REPO_ROOT/scripts/kafka_ping.py" --timeout 5 "${bootstrap%%,*}" ||
    die "weir-testkit at $bootstrap does not answer ApiVersions"
say "weir-testkit pid $pid serving at $bootstrap"
failed=()
for probe in "${PROBES[@]}"; do
    case "$probe" in
    fidelity) script=probe_tansu.py args=(--strict) ;;
    zombie) script=probe_zombie.py args=() ;;
    esac
    say "running $probe: $script ${args[*]}"
    "$PY" "$SCRIPT_DIR/$script" "${args[@]}" --bootstrap "$bootstrap" || failed+=("$probe")
done
if ((${#failed[@]} > 0)); then
    die "probe(s) failed against weir-testkit: ${failed[*]}"
fi

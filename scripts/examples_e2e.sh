#!/usr/bin/env bash
# The weir-streams examples end to end, as separate processes, the way a user
# runs them: `weir-testkit serve` (3 brokers), the `weir` CLI to create topics,
# produce and read, and two `wordcount` processes, one of them stopped with
# SIGTERM mid-run and replaced by a new process on its state directory.
#
#   scripts/examples_e2e.sh [--bootstrap HOST:PORT,...]
#
# With --bootstrap it runs on that cluster (Apache Kafka, say) instead of starting
# weir-testkit; topic and application names then carry a unique suffix.
#
# Checks: a missing input topic is one clear line and a non-zero exit; the
# Prometheus endpoint of --metrics-addr serves the instance's metrics; SIGTERM
# exits 0; under exactly-once the output holds one record per input word and
# every word's last count is its recount. Builds what it runs (debug).
# CARGO_TARGET_DIR is respected. Exit status 0 if every check passed.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"
BIN="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug"
LIMIT_S=120

say() { echo "examples_e2e: $*" >&2; }
die() {
    echo "examples_e2e: FAIL $*" >&2
    exit 1
}

work="$(mktemp -d "${TMPDIR:-/tmp}/weir-examples.XXXXXX")"
pids=()
cleanup() {
    local rc=$?
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if ((rc != 0)); then
        for log in "$work"/*.log; do
            [[ -f "$log" ]] || continue
            echo "---- $(basename "$log") (last lines)" >&2
            tail -n 15 "$log" >&2
        done
    fi
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT

say "building weir-testkit, weir and the weir-streams examples"
cargo build -q -p weir-testkit --bin weir-testkit -p weir-cli --bin weir
cargo build -q -p weir-streams --examples

export KAFKA_BOOTSTRAP
if [[ "${1:-}" == --bootstrap ]]; then
    KAFKA_BOOTSTRAP="${2:?--bootstrap needs HOST:PORT}"
    sfx="-$$-$(date +%s)" # a shared cluster: names no earlier run used
    say "the cluster at $KAFKA_BOOTSTRAP"
else
    "$BIN/weir-testkit" serve --port 0 --brokers 3 </dev/null >"$work/testkit.out" 2>"$work/testkit.log" &
    pids+=($!)
    deadline=$((SECONDS + 30))
    until (($(wc -l <"$work/testkit.out") >= 1)); do
        ((SECONDS < deadline)) || die "weir-testkit printed no address within 30 s"
        sleep 0.05 # poll interval of a bounded readiness loop
    done
    KAFKA_BOOTSTRAP="$(head -n1 "$work/testkit.out")"
    sfx=""
    say "weir-testkit at $KAFKA_BOOTSTRAP"
fi
weir() { "$BIN/weir" "$@"; }
lines="lines$sfx"
counts="counts$sfx"

weir topics create "$lines" -p 6 >/dev/null
weir topics create "$counts" -p 6 >/dev/null

# 1. A missing input topic: one line on stderr, a non-zero exit.
set +e
"$BIN/examples/wordcount" --application-id "wc-bad$sfx" --state-dir "$work/bad" \
    --input "no-such-topic$sfx" --output "$counts" 2>"$work/bad.err" >/dev/null
rc=$?
set -e
((rc != 0)) || die "wordcount with a missing input topic exited 0"
grep -q "no-such-topic" "$work/bad.err" || die "the error does not name the topic: $(cat "$work/bad.err")"
(($(grep -c . "$work/bad.err") == 1)) || die "more than one line on stderr: $(cat "$work/bad.err")"
say "ok   a missing input topic: exit $rc, '$(cat "$work/bad.err")'"

# Deterministic input: 2 x 600 lines of 1 to 5 words out of 12.
gen() {
    awk -v seed="$1" -v n="$2" 'BEGIN {
        split("kafka stream state store commit offset fence zombie rust weir river task", w, " ");
        srand(seed);
        for (i = 0; i < n; i++) {
            k = 1 + int(rand() * 5); line = "";
            for (j = 0; j < k; j++) line = line (j ? " " : "") w[1 + int(rand() * 12)];
            print line
        }
    }'
}
gen 1 600 >"$work/first.txt"
gen 2 600 >"$work/second.txt"
cat "$work/first.txt" "$work/second.txt" >"$work/all.txt"
words=$(wc -w <"$work/all.txt")

last_pid=""
start() { # name state-dir [flags...]; sets last_pid (not in a subshell, so `wait` can reap it)
    local name="$1" dir="$2"
    shift 2
    "$BIN/examples/wordcount" --application-id "wc$sfx" --state-dir "$work/$dir" --input "$lines" \
        --output "$counts" --guarantee exactly-once --threads 2 --instance-id "$dir" \
        -X session.timeout.ms=10000 -X commit.interval.ms=200 "$@" 2>"$work/$name.log" >/dev/null &
    last_pid=$!
    pids+=("$last_pid")
}
outputs() {
    weir consume -t "$counts" --from-beginning -e --isolation read_committed -f '%k\t%v' 2>/dev/null
}
wait_outputs() { # at-least
    local deadline=$((SECONDS + LIMIT_S)) n=0
    while :; do
        n=$(outputs | wc -l)
        ((n >= $1)) && return 0
        ((SECONDS < deadline)) || die "only $n of $1 output records after ${LIMIT_S}s"
        sleep 0.5 # poll interval of a bounded wait on another process
    done
}

stop() { # pid name: SIGTERM, which must close it gracefully (exit 0)
    local rc
    kill -TERM "$1"
    set +e
    wait "$1"
    rc=$?
    set -e
    ((rc == 0)) || die "wordcount $2 exited $rc after SIGTERM"
}

weir produce -t "$lines" <"$work/first.txt"
start a s1
a=$last_pid
start b s2 --metrics-addr 127.0.0.1:0
b=$last_pid
wait_outputs 100
say "ok   two instances count"

# The Prometheus endpoint (--metrics-addr): b's counters and per-task gauges.
url=$(grep -o 'http://[0-9.]*:[0-9]*/metrics' "$work/b.log" | head -n1)
[[ -n "$url" ]] || die "b logged no metrics address"
python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
    "$url" >"$work/metrics.txt" || die "GET $url failed"
# (Series that exist from the start: b may not have committed yet.)
for metric in weir_streams_processed_records_total weir_streams_active_tasks weir_streams_rebalances_total; do
    grep -q "^$metric" "$work/metrics.txt" || die "$url has no $metric: $(head -c 600 "$work/metrics.txt")"
done
say "ok   $url serves $(grep -c '^weir_streams_' "$work/metrics.txt") weir_streams series"

# 2. SIGTERM mid-run: a closes gracefully (exit 0); a new process takes its place.
weir produce -t "$lines" <"$work/second.txt"
stop "$a" a
say "ok   SIGTERM: a closed gracefully (exit 0)"
start a2 s1
a2=$last_pid
wait_outputs "$words"

# 3. Exactly once, and every count right.
outputs >"$work/out.tsv"
got=$(wc -l <"$work/out.tsv")
((got == words)) || die "$got output records for $words input words (exactly-once)"
tr ' ' '\n' <"$work/all.txt" | sort | uniq -c | awk '{ print $2 "\t" $1 }' | sort >"$work/want.tsv"
awk -F'\t' '{ last[$1] = $2 } END { for (w in last) print w "\t" last[w] }' "$work/out.tsv" |
    sort >"$work/last.tsv"
diff "$work/want.tsv" "$work/last.tsv" >"$work/diff.txt" || die "last counts differ from the recount: $(cat "$work/diff.txt")"
say "ok   $got output records for $words words; every last count equals the recount"

stop "$b" b
stop "$a2" a2
say "passed"

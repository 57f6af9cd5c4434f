#!/usr/bin/env bash
# Smoke test of the Kafka Streams 4.4 reference applications on a real Kafka cluster:
#
#   compare/kafka-streams/smoke.sh BOOTSTRAP
#
# e.g. eval "$(WEIR_KAFKA_RUN_DIR=/tmp/k scripts/kafka.sh start --nodes 1)"
#      compare/kafka-streams/smoke.sh "$KAFKA_BOOTSTRAP"
#
# Builds the apps (build.sh), checks that each rejects an unknown flag with one line and
# exit 2, then runs wordcount, dedup and deploy under at-least-once and exactly-once (and
# wordcount once more on group.protocol=streams) on topics of their own: tiny inputs in two
# batches, outputs and changelogs judged by an independent reader (smoke.py, librdkafka;
# read_committed under exactly-once), then SIGTERM and exit 0 checked. Two runs at a time.
# One line per check ("ok   ..." or "FAIL ..."), a summary last; exit status 1 if any
# check failed. Topics it made are deleted at the end; logs stay in the printed work dir.
#
# Environment: WEIR_PYTHON (a python with confluent-kafka; default: scripts/pyenv.sh),
# SMOKE_JAVA_OPTS (default: small heap, serial GC, C1 only).
set -uo pipefail

BOOTSTRAP="${1:-}"
if [[ -z "$BOOTSTRAP" || "$BOOTSTRAP" == -* ]]; then
    echo "usage: smoke.sh BOOTSTRAP (HOST:PORT[,HOST:PORT...])" >&2
    exit 2
fi
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$DIR/../.." && pwd)"
STARTED=$(date +%s)

CP="$("$DIR/build.sh")" || { echo "FAIL build: see above"; exit 1; }
PY="${WEIR_PYTHON:-$("$REPO/scripts/pyenv.sh")}" || { echo "FAIL python: scripts/pyenv.sh failed"; exit 1; }
JUDGE=("$PY" "$DIR/smoke.py" "$BOOTSTRAP")
read -r -a JAVA_OPTS <<<"${SMOKE_JAVA_OPTS:--Xmx256m -Xms32m -Xss512k -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -XX:ActiveProcessorCount=2}"
RUN="ks-smoke-$(date +%s)-$$"
# every run's input timestamps start here (smoke.py)
SMOKE_BASE_TS=$(date +%s%3N)
export SMOKE_BASE_TS
WORK="$(mktemp -d "/tmp/$RUN.XXXX")"
echo "smoke: Kafka Streams reference apps on $BOOTSTRAP (run $RUN, logs in $WORK)"

cleanup() {
    local p
    for p in $(cat "$WORK"/*.pid 2>/dev/null); do
        kill -KILL "$p" 2>/dev/null || true
    done
    "${JUDGE[@]}" cleanup "$RUN" >/dev/null 2>&1 || true
}
trap cleanup EXIT

class_of() {
    case "$1" in
        wordcount) echo dev.weir.compare.WordCount ;;
        dedup) echo dev.weir.compare.Dedup ;;
        deploy) echo dev.weir.compare.Deploy ;;
    esac
}

# The command line: an unknown flag is one line on stderr and exit 2, for every app.
cli_checks() {
    local app rc err
    for app in wordcount dedup deploy; do
        err="$(java "${JAVA_OPTS[@]}" -cp "$CP" "$(class_of "$app")" --bootstrap "$BOOTSTRAP" \
            --application-id x --state-dir "$WORK/x" --input i --output o --no-such-flag 1 2>&1 >/dev/null)"
        rc=$?
        if [[ $rc == 2 && $(wc -l <<<"$err") == 1 ]]; then
            echo "ok   $app cli: unknown flag rejected, exit 2: $err"
        else
            echo "FAIL $app cli: unknown flag gave exit $rc and: $err"
        fi
    done
    err="$(java "${JAVA_OPTS[@]}" -cp "$CP" dev.weir.compare.Dedup --bootstrap "$BOOTSTRAP" \
        --application-id x --state-dir "$WORK/x" --input i --output o --window-ms soon 2>&1 >/dev/null)"
    rc=$?
    if [[ $rc == 2 && $(wc -l <<<"$err") == 1 ]]; then
        echo "ok   dedup cli: bad --window-ms rejected, exit 2: $err"
    else
        echo "FAIL dedup cli: bad --window-ms gave exit $rc and: $err"
    fi
}

# run_case LABEL APP GUARANTEE [APP FLAGS...]: one app instance through two batches, judged,
# then SIGTERM. Prints its lines.
run_case() {
    local label="$1" app="$2" guarantee="$3"
    shift 3
    local id="$RUN-$label" parts=3 isolation=read_uncommitted t0 pid rc n1 n2 key=() i
    local in="$id-in" out="$id-out" log="$WORK/$label.log"
    [[ $app == deploy ]] && parts=12
    [[ $guarantee == exactly-once ]] && isolation=read_committed
    line() { echo "$1 $label: $2"; }
    if ! "${JUDGE[@]}" topics "$in:$parts" "$out:$parts" 2>"$WORK/$label.judge"; then
        line FAIL "creating $in and $out: $(tail -n1 "$WORK/$label.judge")"
        return
    fi
    "${JUDGE[@]}" produce "$app" 1 "$in" || { line FAIL "producing batch 1"; return; }
    t0=$(date +%s%3N)
    java "${JAVA_OPTS[@]}" -cp "$CP" "$(class_of "$app")" --bootstrap "$BOOTSTRAP" \
        --application-id "$id" --state-dir "$WORK/$label" --input "$in" --output "$out" \
        --guarantee "$guarantee" "$@" >"$log" 2>&1 &
    pid=$!
    echo "$pid" >"$WORK/$label.pid"
    n1="$("${JUDGE[@]}" expect "$app" 1)"
    if "${JUDGE[@]}" wait "$out" "$n1" "$isolation" 90 2>>"$WORK/$label.judge"; then
        line "ok  " "started, batch 1 processed ($n1 outputs) after $(($(date +%s%3N) - t0)) ms"
    else
        line FAIL "batch 1 not processed within 90 s: $(tail -n1 "$WORK/$label.judge"); log $log"
    fi
    # under at-least-once the smoke sets commit.interval.ms=1000: let batch 1 be committed
    [[ $guarantee == at-least-once ]] && sleep 2
    "${JUDGE[@]}" produce "$app" 2 "$in" || line FAIL "producing batch 2"
    n2="$("${JUDGE[@]}" expect "$app" 2)"
    [[ $app == dedup ]] && key=(m1)
    t0=$(date +%s%3N)
    if "${JUDGE[@]}" wait "$out" "$n2" "$isolation" 90 "${key[@]}" 2>>"$WORK/$label.judge"; then
        line "ok  " "batch 2 processed (>= $n2 outputs) after $(($(date +%s%3N) - t0)) ms"
    else
        line FAIL "batch 2 not processed within 90 s: $(tail -n1 "$WORK/$label.judge"); log $log"
    fi
    "${JUDGE[@]}" check "$label" "$app" "$guarantee" "$id" "$out" "$log"
    if grep -q -- "group.protocol=streams" <<<"$*"; then
        if grep -q "streams group $id configs set: {streams.num.standby.replicas=1}" "$log"; then
            line "ok  " "group.protocol=streams: --standbys 1 set as the group's streams.num.standby.replicas"
        else
            line FAIL "group.protocol=streams: the group config line is missing from $log"
        fi
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid"
        line FAIL "the instance had already exited ($?) before SIGTERM; log $log"
        return
    fi
    t0=$(date +%s%3N)
    kill -TERM "$pid"
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid"
        wait "$pid"
        line FAIL "still running 75 s after SIGTERM (killed); log $log"
        return
    fi
    wait "$pid"
    rc=$?
    if [[ $rc == 0 ]] && grep -q "^$app: closed" "$log"; then
        line "ok  " "SIGTERM: closed gracefully, exit 0 after $(($(date +%s%3N) - t0)) ms"
    else
        line FAIL "SIGTERM: exit $rc; last line: $(grep "^$app:" "$log" | tail -n1)"
    fi
    # CloseOptions LEAVE_GROUP: the member is gone at once, not after the session timeout
    # (classic groups only: the streams group of KIP-1071 is not described by this client)
    if ! grep -q -- "group.protocol=streams" <<<"$*"; then
        local left
        if left="$("${JUDGE[@]}" group-left "$id" 2>>"$WORK/$label.judge")"; then
            line "ok  " "left the group on close ($left, before the 10 s session timeout)"
        else
            line FAIL "did not leave the group on close: $left"
        fi
    fi
}

# Two runs at a time (2 cores); their lines are printed in order once both are done.
declare -A CASE_ARGS=(
    [wordcount-alos]="wordcount at-least-once -X commit.interval.ms=1000"
    [wordcount-eos]="wordcount exactly-once --instance-id wc-1"
    [dedup-alos]="dedup at-least-once --fail-marker FAIL -X commit.interval.ms=1000"
    [dedup-eos]="dedup exactly-once --fail-marker FAIL --instance-id dd-1"
    [deploy-alos]="deploy at-least-once -X commit.interval.ms=1000"
    [deploy-eos]="deploy exactly-once --threads 2 --instance-id dp-1"
    [wordcount-eos-streams]="wordcount exactly-once --instance-id ws-1 --standbys 1 -X group.protocol=streams"
)
ORDER=(wordcount-alos wordcount-eos dedup-alos dedup-eos deploy-alos deploy-eos wordcount-eos-streams)

cli_checks | tee "$WORK/results"
for ((k = 0; k < ${#ORDER[@]}; k += 2)); do
    for label in "${ORDER[@]:k:2}"; do
        # shellcheck disable=SC2086
        run_case "$label" ${CASE_ARGS[$label]} >"$WORK/$label.out" 2>>"$WORK/$label.err" &
    done
    wait
    for label in "${ORDER[@]:k:2}"; do
        tee -a "$WORK/results" <"$WORK/$label.out"
    done
done

total=$(grep -c -E '^(ok  |FAIL) ' "$WORK/results")
failed=$(grep -c '^FAIL ' "$WORK/results")
echo "smoke: $total checks, $failed failed, in $(($(date +%s) - STARTED)) s"
[[ $failed == 0 ]]

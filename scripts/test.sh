#!/usr/bin/env bash
# Weir's test command: everything CI checks, runnable on a fresh machine.
#
#   scripts/test.sh
#
# 1. toolchain: rustfmt, clippy and cargo-nextest (installed if missing);
# 2. broker: Apache Kafka 4.4 from Maven Central (scripts/kafka.sh: 3 combined KRaft nodes on
#    loopback, RF 3, min.insync.replicas=2; stopped on exit), unless KAFKA_BOOTSTRAP is
#    already set, in which case that broker is used as it is; WEIR_BROKER=tansu starts tansu
#    instead (it cannot check aborts: see docs/guide/src/testing.md);
# 3. independent clients: a Python venv with confluent-kafka and kafka-python, smoke-tested
#    against the broker (scripts/interop/probe_tansu.py);
# 4. cargo fmt --check, clippy -D warnings, nextest (unit + integration), the same probe
#    against weir-testkit plus the zombie-fencing probe (scripts/interop/probe_testkit.sh),
#    the weir CLI against librdkafka's mock cluster (scripts/interop/probe_mock_cluster.sh:
#    ApiVersions downgrade), the weir-streams examples as processes (scripts/examples_e2e.sh)
#    and a rolling deploy of wordcount processes (scripts/rolling_deploy_procs.py), each on
#    weir-testkit and on the Kafka cluster, the transaction and streams suites again on
#    Kafka 4.4 formatted with transaction.version=1 and on Kafka 3.9 (one node each), the
#    Kafka Streams 4.4 reference apps' smoke run (compare/kafka-streams/smoke.sh), the
#    testkit-against-Kafka fidelity suite once more at the versions Weir negotiates, doc tests, the user guide
#    (scripts/guide.sh: links, configuration reference, mdBook build), a compile check of the fuzz targets, and benches/peers built and run once
#    with tiny sizes (scripts/peers_smoke.sh; under CI it apt-get installs librocksdb-dev
#    and libclang-dev).
#
# Every cargo step runs even if an earlier one failed, so one run shows all problems; the
# exit status is non-zero if any step failed. Tests see:
#   KAFKA_BOOTSTRAP     the broker address
#   WEIR_EXPECT_BROKER  1: a test that needs a broker must fail, not skip, without one
#   WEIR_PYTHON         python with confluent-kafka and kafka-python, for interop tests
#   WEIR_KAFKA_TOOL     absolute path of scripts/interop/kafka_tool.py, to run with it:
#                       "$WEIR_PYTHON" "$WEIR_KAFKA_TOOL" consume -t TOPIC --from-beginning ...
#   WEIR_TESTKIT_BIN    the standalone weir-testkit binary (built before the tests)
#   WEIR_BROKER_KIND    "kafka" or "tansu" for the broker this script started (so tests can
#                       name a broker's known faults when they skip); with KAFKA_BOOTSTRAP
#                       given, the caller's value
# Java 17 and Maven must be on the machine for Apache Kafka (jars cached in .weir-kafka/);
# without them the script stops with one line saying so.
# CARGO_TARGET_DIR is respected; by default cargo's target/ is used.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
cd "$REPO_ROOT"

BROKER_DIR="${WEIR_BROKER_DIR:-$REPO_ROOT/.weir-broker}"
export WEIR_BROKER_DIR="$BROKER_DIR"
LOG_DIR="$(mktemp -d "${TMPDIR:-/tmp}/weir-test.XXXXXX")"
RUN_STARTED=$(date +%s)
FAILED_STEPS=()
STARTED_BROKER_RUN_DIR=""

section() { printf '\n==== %s ====\n' "$*"; }
note() { echo "test.sh: $*"; }
fatal() {
    echo "test.sh: error: $*" >&2
    exit 1
}

# Stops the broker this script started, if any; with show_log, prints its last lines.
stop_broker() {
    local show_log="$1"
    [[ -n "$STARTED_BROKER_RUN_DIR" ]] || return 0
    if [[ "${WEIR_BROKER_KIND:-}" == kafka ]]; then
        if [[ "$show_log" == 1 ]]; then
            echo "test.sh: last Kafka log lines of node 1:" >&2
            tail -n 15 "$STARTED_BROKER_RUN_DIR/node1/kafka.log" >&2 || true
        fi
        WEIR_KAFKA_RUN_DIR="$STARTED_BROKER_RUN_DIR" "$SCRIPT_DIR/kafka.sh" stop || true
    else
        WEIR_BROKER_RUN_DIR="$STARTED_BROKER_RUN_DIR" "$SCRIPT_DIR/broker.sh" stop || true
        if [[ "$show_log" == 1 && -s "$STARTED_BROKER_RUN_DIR/tansu.log" ]]; then
            echo "test.sh: last broker log lines:" >&2
            tail -n 15 "$STARTED_BROKER_RUN_DIR/tansu.log" >&2 || true
        fi
    fi
    rm -rf "$STARTED_BROKER_RUN_DIR"
    STARTED_BROKER_RUN_DIR=""
}

cleanup() {
    local rc=$?
    stop_broker "$((rc != 0))"
    rm -rf "$LOG_DIR"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Runs one named step with its output teed to a log; records a failure instead of exiting.
step() {
    local name="$1" log="$LOG_DIR/$1.log" started rc=0
    shift
    section "$name: $*"
    started=$(date +%s)
    "$@" 2>&1 | tee "$log" || rc=$?
    if ((rc == 0)); then
        note "$name passed in $(($(date +%s) - started))s"
    else
        note "$name FAILED (exit $rc) after $(($(date +%s) - started))s"
        FAILED_STEPS+=("$name")
    fi
}

# ---- toolchain ---------------------------------------------------------------------------
section "toolchain"
command -v cargo >/dev/null || fatal "cargo not found: install Rust with rustup first"
for component in rustfmt clippy; do
    sub="${component/rustfmt/fmt}"
    if ! cargo "$sub" --version >/dev/null 2>&1; then
        note "cargo $sub missing: rustup component add $component"
        rustup component add "$component" || fatal "could not add rustup component $component"
    fi
done
TEST_RUNNER=nextest
if ! cargo nextest --version >/dev/null 2>&1; then
    note "cargo-nextest missing: cargo install cargo-nextest --locked (takes a few minutes)"
    if ! cargo install cargo-nextest --locked; then
        note "cargo-nextest could not be installed; falling back to cargo test"
        TEST_RUNNER=cargo-test
    fi
fi
cargo --version
cargo fmt --version
cargo clippy --version
# sed, not head: head would close the pipe early and pipefail would count the SIGPIPE.
if [[ "$TEST_RUNNER" == nextest ]]; then cargo nextest --version | sed -n 1p; fi

# ---- broker ------------------------------------------------------------------------------
section "broker"
if [[ -n "${KAFKA_BOOTSTRAP:-}" ]]; then
    note "KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP given: using that broker, starting no broker"
    python3 "$SCRIPT_DIR/kafka_ping.py" --timeout 5 "${KAFKA_BOOTSTRAP%%,*}" ||
        fatal "the broker at $KAFKA_BOOTSTRAP does not answer ApiVersions"
    # WEIR_BROKER_KIND stays whatever the caller set (e.g. tansu started by hand).
elif [[ "${WEIR_BROKER:-kafka}" == tansu ]]; then
    "$SCRIPT_DIR/broker.sh" install || fatal "could not install tansu"
    # A run dir of our own, so a broker a developer started by hand is left alone.
    mkdir -p "$BROKER_DIR"
    STARTED_BROKER_RUN_DIR="$(mktemp -d "$BROKER_DIR/run.XXXXXX")"
    out="$(WEIR_BROKER_RUN_DIR="$STARTED_BROKER_RUN_DIR" "$SCRIPT_DIR/broker.sh" start)" ||
        fatal "could not start tansu"
    KAFKA_BOOTSTRAP="${out#KAFKA_BOOTSTRAP=}"
    [[ "$KAFKA_BOOTSTRAP" =~ ^127\.0\.0\.1:[0-9]+$ ]] ||
        fatal "broker.sh start printed '$out', expected KAFKA_BOOTSTRAP=127.0.0.1:PORT"
    export WEIR_BROKER_KIND=tansu
else
    # Apache Kafka, three nodes, in a run dir of our own (a cluster a developer started by
    # hand with scripts/kafka.sh is left alone). kafka.sh says in one line what is missing
    # (java, mvn, Maven Central) if it cannot fetch or start Kafka.
    mkdir -p "$REPO_ROOT/.weir-kafka"
    STARTED_BROKER_RUN_DIR="$(mktemp -d "$REPO_ROOT/.weir-kafka/test-run.XXXXXX")"
    export WEIR_BROKER_KIND=kafka
    out="$(WEIR_KAFKA_RUN_DIR="$STARTED_BROKER_RUN_DIR" "$SCRIPT_DIR/kafka.sh" start --nodes "${WEIR_KAFKA_NODES:-3}")" ||
        fatal "could not start Apache Kafka (scripts/kafka.sh start failed; see the line above)"
    KAFKA_BOOTSTRAP="${out#KAFKA_BOOTSTRAP=}"
    [[ "$KAFKA_BOOTSTRAP" =~ ^127\.0\.0\.1:[0-9]+ ]] ||
        fatal "kafka.sh start printed '$out', expected KAFKA_BOOTSTRAP=127.0.0.1:PORT,..."
    # The cluster's files, for the exactly-once verdict read from Kafka's own logs
    # (tests/eos_kafka.rs), which must not be skipped here.
    export WEIR_KAFKA_RUN_DIR="$STARTED_BROKER_RUN_DIR" WEIR_EXPECT_KAFKA_LOGS=1
fi
export KAFKA_BOOTSTRAP
export WEIR_EXPECT_BROKER=1
note "KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP"

# ---- independent clients -----------------------------------------------------------------
section "python clients"
WEIR_PYTHON="$("$SCRIPT_DIR/pyenv.sh")" || fatal "could not set up the Python clients"
export WEIR_PYTHON
export WEIR_KAFKA_TOOL="$SCRIPT_DIR/interop/kafka_tool.py"
note "WEIR_PYTHON=$WEIR_PYTHON"
step broker-probe "$WEIR_PYTHON" "$SCRIPT_DIR/interop/probe_tansu.py"

# ---- cargo -------------------------------------------------------------------------------
# rustfmt colours its diff even into a pipe; CI logs read better without escape codes.
fmt_color=()
[[ -t 1 ]] || fmt_color=(--color never)
step fmt cargo fmt --all -- --check "${fmt_color[@]}"
step clippy cargo clippy --workspace --all-targets -- -D warnings
# Builds one binary and prints the path of its executable, wherever CARGO_TARGET_DIR points.
build_bin() {
    local package="$1" bin="$2"
    cargo build -p "$package" --bin "$bin" --message-format=json-render-diagnostics |
        python3 -c 'import json, sys
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("reason") == "compiler-artifact" and msg.get("executable"):
        print(msg["executable"])' | tail -n1
}
# The standalone testkit broker, for interop tests that run librdkafka against it as an
# external process (WEIR_TESTKIT_BIN); without it they use an in-process cluster and say so.
section "testkit binary"
if WEIR_TESTKIT_BIN="$(build_bin weir-testkit weir-testkit)" && [[ -x "$WEIR_TESTKIT_BIN" ]]; then
    export WEIR_TESTKIT_BIN
    note "WEIR_TESTKIT_BIN=$WEIR_TESTKIT_BIN"
else
    note "testkit-binary FAILED: could not build the weir-testkit binary"
    FAILED_STEPS+=("testkit-binary")
fi
# The weir CLI, which the mock-cluster probe runs against librdkafka's mock cluster.
section "weir CLI binary"
if WEIR_CLI_BIN="$(build_bin weir-cli weir)" && [[ -x "$WEIR_CLI_BIN" ]]; then
    note "WEIR_CLI_BIN=$WEIR_CLI_BIN"
else
    note "weir-cli-binary FAILED: could not build the weir CLI"
    FAILED_STEPS+=("weir-cli-binary")
    WEIR_CLI_BIN=""
fi
if [[ "$TEST_RUNNER" == nextest ]]; then
    step tests cargo nextest run --workspace --no-fail-fast
else
    # --all-targets leaves doc tests out; they get their own step below.
    step tests cargo test --workspace --all-targets --no-fail-fast
fi
# weir-testkit stands in for Kafka where tansu is wrong, so an independent client checks it
# too, strictly (read_committed must hide aborted records there).
step testkit-probe "$SCRIPT_DIR/interop/probe_testkit.sh" "$WEIR_PYTHON" fidelity
# librdkafka as a zombie transactional producer against weir-testkit must be
# fenced with a FATAL error (_FENCED), as Apache Kafka (KIP-588) makes librdkafka see it.
step testkit-zombie-probe "$SCRIPT_DIR/interop/probe_testkit.sh" "$WEIR_PYTHON" zombie
# The weir CLI against librdkafka's mock cluster, which answers ApiVersions v3
# with UNSUPPORTED_VERSION, so Weir must downgrade. Without a CLI binary the probe tries to
# build it and fails loudly; it is never skipped.
step mock-cluster-probe "$SCRIPT_DIR/interop/probe_mock_cluster.sh" "$WEIR_CLI_BIN"
# The weir-streams examples as separate processes on `weir-testkit serve`: a
# clear error for a missing topic, SIGTERM exits 0, a replaced instance, exact counts.
step examples-e2e "$SCRIPT_DIR/examples_e2e.sh"
# A rolling deploy of 3 wordcount processes (built by examples-e2e): worst latency per
# partition printed, exactly-once checked.
step rolling-deploy-procs python3 "$SCRIPT_DIR/rolling_deploy_procs.py" --bin "${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug"
# The DSL examples check their own results on an embedded cluster, with a crash.
# The same two on the real broker (Apache Kafka, 3 nodes, unless another was given).
step examples-e2e-broker "$SCRIPT_DIR/examples_e2e.sh" --bootstrap "$KAFKA_BOOTSTRAP"
step rolling-deploy-procs-broker python3 "$SCRIPT_DIR/rolling_deploy_procs.py" --bin "${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug" --bootstrap "$KAFKA_BOOTSTRAP"
# Transactions and the streams word count on the other transaction versions: Kafka 4.4
# formatted with transaction.version=1, and Kafka 3.9 (the line many users still run; no
# finalized transaction version), one node each, started and stopped here.
other_kafka() { # label kafka.sh-start-args...
    local label="$1" dir out rc=0
    shift
    dir="$(mktemp -d "$REPO_ROOT/.weir-kafka/test-run.XXXXXX")"
    out="$(WEIR_KAFKA_RUN_DIR="$dir" "$SCRIPT_DIR/kafka.sh" start --nodes 1 "$@")" || rc=$?
    if ((rc == 0)); then
        # Bounded, so a hang fails this step instead of stalling the whole run.
        KAFKA_BOOTSTRAP="${out#KAFKA_BOOTSTRAP=}" WEIR_BROKER_KIND=kafka WEIR_KAFKA_RUN_DIR="$dir" \
            timeout 1200 cargo test -p weir-integration --test txn_kafka --test txn_broker \
            --test streams_broker --test eos_kafka || rc=$?
    else
        echo "test.sh: could not start Kafka ($label)" >&2
    fi
    WEIR_KAFKA_RUN_DIR="$dir" "$SCRIPT_DIR/kafka.sh" stop || true
    rm -rf "$dir"
    return "$rc"
}
if [[ "${WEIR_BROKER_KIND:-}" == kafka ]]; then
    # The Kafka Streams 4.4 reference apps (compare/kafka-streams, built with Maven) run
    # with tiny inputs on the same cluster, judged by librdkafka, so they cannot rot.
    step kafka-streams-smoke "$REPO_ROOT/compare/kafka-streams/smoke.sh" "$KAFKA_BOOTSTRAP"
    # The side-by-side deploy harness, tiny, on debug binaries, so it cannot rot (about 70 s):
    # both word counts through a rolling restart, judged exact by librdkafka.
    step compare-deploy-smoke env WEIR_COMPARE_PROFILE=debug "$REPO_ROOT/compare/run.sh" deploy \
        --instances 2 --baseline 3 --settle 2 --after 3
    # The fidelity suite (in the tests step above) compares the testkit with Kafka at the
    # versions both speak; once more at the versions Weir negotiates with each, where Kafka
    # runs transaction version 2 (differences listed in tests/fidelity.rs).
    step fidelity-weir-versions env WEIR_FIDELITY_VERSIONS=weir \
        cargo test -p weir-integration --test fidelity -- --nocapture
    step kafka-tv1 other_kafka "4.4, transaction.version=1" --feature transaction.version=1
    step kafka-3.9 other_kafka "3.9.1" --version 3.9.1
fi
step dsl-examples "$SCRIPT_DIR/dsl_examples.sh"
step doctests cargo test --workspace --doc
# The user guide (scripts/guide.sh): the configuration reference checked against the
# code's property lists, every relative link of the Markdown checked, the book built with
# mdBook. About 1 s; the first run on a machine without mdbook installs it from crates.io
# (about 2 min of compiling, once).
step guide "$SCRIPT_DIR/guide.sh"
# The fuzz targets (their own workspace, fuzz/) must keep compiling against the
# crates they drive; running them needs cargo-fuzz (scripts/fuzz_smoke.sh, fuzz/README.md).
step fuzz-targets-build cargo check --manifest-path fuzz/Cargo.toml --bins --examples
# benches/peers (Weir against rust-rdkafka and RocksDB, its own workspace) built
# in debug and run once with 2,000 records, every phase, on the testkit binary above, so
# its use of the client and store APIs cannot rot. Under CI it apt-get installs Debian's
# librocksdb-dev and libclang-dev (linked through bindgen; RocksDB is not compiled).
# About 110 s from a cold benches/peers/target, mostly librdkafka's C build.
step peers-bench "$SCRIPT_DIR/peers_smoke.sh" "${WEIR_TESTKIT_BIN:-}"

# ---- summary -----------------------------------------------------------------------------
section "summary"
# Stopped here rather than only in the exit trap, so the count line below is the last one.
stop_broker "$((${#FAILED_STEPS[@]} > 0))"
# Sum the runners' own counts so one closing line tells the whole story.
read -r passed failed skipped < <(cat "$LOG_DIR/tests.log" "$LOG_DIR/doctests.log" 2>/dev/null |
    awk '
        / Summary \[/ && /tests? run:/ {
            for (i = 1; i <= NF; i++) {
                w = $(i + 1); sub(/[,;]$/, "", w)
                if (w == "passed") p += $i
                if (w == "failed" || w == "timed") f += $i
                if (w == "skipped") s += $i
            }
        }
        /^test result:/ {
            for (i = 1; i <= NF; i++) {
                w = $(i + 1); sub(/[,;]$/, "", w)
                if (w == "passed") p += $i
                if (w == "failed") f += $i
                if (w == "ignored") s += $i
            }
        }
        END { printf "%d %d %d\n", p, f, s }')
note "total time $(($(date +%s) - RUN_STARTED))s"
echo "weir: $passed passed, $failed failed, $skipped skipped"
if ((${#FAILED_STEPS[@]} > 0)); then
    # After the counts on purpose: a build failure runs no test, so "0 failed" above would
    # otherwise be the last word.
    note "FAILED steps: ${FAILED_STEPS[*]} (counts above cover only tests that ran)"
    exit 1
fi

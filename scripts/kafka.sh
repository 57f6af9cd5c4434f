#!/usr/bin/env bash
# Apache Kafka on this machine, from Maven Central jars: one command for a real cluster.
#
#   scripts/kafka.sh install [--version V]       resolve Kafka V's jars once (cached, then offline)
#   scripts/kafka.sh start [--nodes 1|3] [--version V] [--feature NAME=LEVEL]... [-o KEY=VALUE]...
#                          [--listen-ips IP,...]    (clients' listener of node N on the Nth IP,
#                                                   e.g. addresses a network namespace reaches;
#                                                   default 127.0.0.1 for every node)
#                                                format KRaft storage, start combined nodes on
#                                                loopback, wait until every node answers and
#                                                Metadata lists them all, print
#                                                KAFKA_BOOTSTRAP=127.0.0.1:P1,127.0.0.1:P2,...
#   scripts/kafka.sh stop                        SIGTERM every node, SIGKILL after a bound
#   scripts/kafka.sh status                      say what runs, and where
#   scripts/kafka.sh logs [NODE]                 the last lines of a node's log
#
# Only `KAFKA_BOOTSTRAP=...` goes to stdout, so `eval "$(scripts/kafka.sh start)"` works;
# progress and errors go to stderr, always as one line that names what is missing.
#
# Versions: 4.4.0 by default; `--version 3.9.1` gives the line many users still run
# (transaction version 1, classic groups only). `--feature transaction.version=1` formats a
# 4.4 cluster without KIP-890's transaction version 2.
#
# Three nodes: replication factor 3 for new topics and internal topics, min.insync.replicas=2.
# Every node is a combined broker and controller. Heap and thread counts are sized for a
# 2-core machine (see node_properties below); -o KEY=VALUE adds or overrides a broker
# property on every node (e.g. -o group.initial.rebalance.delay.ms=0).
#
# Environment:
#   WEIR_KAFKA_DIR       jar cache (default: <repo>/.weir-kafka); VERSION/lib holds the jars
#   WEIR_KAFKA_RUN_DIR   where config, data, logs, pids and the address live
#                        (default: WEIR_KAFKA_DIR/run), so scripts/test.sh can run its own
#                        cluster beside a developer's
#   WEIR_KAFKA_HEAP      JVM heap per node (default 512m)
#   WEIR_KAFKA_START_TIMEOUT  seconds to wait for the cluster (default 120)
#   PYTHON               python for free ports and the readiness probe (default python3)
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
KAFKA_DIR="${WEIR_KAFKA_DIR:-$REPO_ROOT/.weir-kafka}"
RUN_DIR="${WEIR_KAFKA_RUN_DIR:-$KAFKA_DIR/run}"
HEAP="${WEIR_KAFKA_HEAP:-512m}"
START_TIMEOUT="${WEIR_KAFKA_START_TIMEOUT:-120}"
PYTHON="${PYTHON:-python3}"
DEFAULT_VERSION="4.4.0"

say() { echo "kafka: $*" >&2; }
die() {
    echo "kafka: error: $*" >&2
    exit 1
}
now_ms() { date +%s%3N; }

lib_dir() { echo "$KAFKA_DIR/$1/lib"; }

cmd_install() {
    local version="$1" lib started log rc=0
    lib="$(lib_dir "$version")"
    [[ -f "$lib/.complete" ]] && return 0
    command -v java >/dev/null || die "java not found: Apache Kafka needs a JDK 17 (apt-get install openjdk-17-jdk-headless)"
    command -v mvn >/dev/null || die "mvn not found: Kafka's jars come from Maven Central through Maven (apt-get install maven)"
    mkdir -p "$KAFKA_DIR"
    # Concurrent installs in one checkout: the second waits, then finds the jars in place.
    # The lock is released before returning: the Kafka JVMs that cmd_start forks would
    # otherwise inherit it and hold it for as long as they run, and an install of another
    # version (say while a cluster of this one runs) would wait forever.
    exec 8>"$KAFKA_DIR/install.lock"
    flock -w 900 8 || die "waited 900 s for $KAFKA_DIR/install.lock (another install?)"
    if [[ -f "$lib/.complete" ]]; then
        exec 8>&-
        return 0
    fi
    started=$(now_ms)
    log="$KAFKA_DIR/install-$version.log"
    say "resolving Apache Kafka $version from Maven Central (once; log: $log)"
    rm -rf "$lib.tmp"
    timeout 900 mvn -B -q -f "$REPO_ROOT/kafka/pom.xml" -Dkafka.version="$version" \
        dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$lib.tmp" \
        >"$log" 2>&1 || rc=$?
    if ((rc != 0)) || [[ ! -f "$lib.tmp/kafka_2.13-$version.jar" ]]; then
        die "could not resolve org.apache.kafka:kafka_2.13:$version from Maven Central (mvn exit $rc; last line: $(grep -m1 -E 'ERROR|Could not' "$log" || tail -n1 "$log"))"
    fi
    rm -rf "$lib"
    mv "$lib.tmp" "$lib"
    touch "$lib/.complete"
    exec 8>&-
    say "Kafka $version: $(find "$lib" -name '*.jar' | wc -l) jars in $lib after $(($(now_ms) - started)) ms"
}

# A free TCP port on the address $1 (default loopback).
free_port() {
    "$PYTHON" -c 'import socket, sys
s = socket.socket()
s.bind((sys.argv[1], 0))
print(s.getsockname()[1])' "${1:-127.0.0.1}"
}

# The pid in node N's pid file if that process is alive and is a Kafka JVM.
node_pid() {
    local f="$RUN_DIR/node$1/pid" pid
    [[ -f "$f" ]] || return 1
    pid="$(cat "$f")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka.Kafka' || return 1
    echo "$pid"
}

node_count() { cat "$RUN_DIR/nodes" 2>/dev/null || echo 0; }

running_nodes() {
    local n i count=0
    n="$(node_count)"
    for ((i = 1; i <= n; i++)); do
        node_pid "$i" >/dev/null && count=$((count + 1))
    done
    echo "$count"
}

write_log4j() {
    # The properties format needs no YAML library. Kafka's own chatter at WARN; the one
    # "started" line and the controller's election lines stay visible at INFO.
    cat >"$RUN_DIR/log4j2.properties" <<'EOF'
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c{1})%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = OUT
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
EOF
}

# node_properties N NODES PORT CONTROLLER_PORT VOTERS HOST
node_properties() {
    local id="$1" nodes="$2" port="$3" cport="$4" voters="$5" host="$6" rf isr
    if ((nodes >= 3)); then rf=3 isr=2; else rf=1 isr=1; fi
    cat <<EOF
process.roles=broker,controller
node.id=$id
listeners=PLAINTEXT://$host:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://$host:$port
controller.listener.names=CONTROLLER
controller.quorum.voters=$voters
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs=$RUN_DIR/node$id/data
# Sized for 2 cores shared by every node and the tests.
num.network.threads=2
num.io.threads=2
background.threads=2
num.replica.fetchers=1
num.recovery.threads.per.data.dir=1
log.cleaner.threads=1
offsets.topic.num.partitions=10
transaction.state.log.num.partitions=10
# Replication: RF 3 and min ISR 2 on three nodes, 1 on one.
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
EOF
}

cmd_start() {
    local nodes=1 version="$DEFAULT_VERSION" features=() overrides=() hosts=()
    while (($#)); do
        case "$1" in
        --nodes) nodes="${2:?--nodes needs 1 or 3}"; shift 2 ;;
        --version) version="${2:?--version needs a Kafka version}"; shift 2 ;;
        --feature) features+=("${2:?--feature needs NAME=LEVEL}"); shift 2 ;;
        -o) overrides+=("${2:?-o needs KEY=VALUE}"); shift 2 ;;
        --listen-ips) IFS=, read -r -a hosts <<<"${2:?--listen-ips needs IP,IP,...}"; shift 2 ;;
        *) die "unknown start option '$1' (see: $0 help)" ;;
        esac
    done
    [[ "$nodes" == 1 || "$nodes" == 3 ]] || die "--nodes must be 1 or 3, got '$nodes'"
    cmd_install "$version"
    mkdir -p "$RUN_DIR"
    if (($(running_nodes) > 0)); then
        say "already running: $(running_nodes) node(s) at $(cat "$RUN_DIR/bootstrap" 2>/dev/null)"
        echo "KAFKA_BOOTSTRAP=$(cat "$RUN_DIR/bootstrap")"
        return 0
    fi
    rm -rf "${RUN_DIR:?}"/node* "$RUN_DIR/bootstrap" "$RUN_DIR/nodes"
    write_log4j
    local lib started i ports=() cports=() voters="" cluster_id bootstrap=""
    lib="$(lib_dir "$version")"
    started=$(now_ms)
    if ((${#hosts[@]} == 0)); then
        for ((i = 0; i < nodes; i++)); do hosts[i]=127.0.0.1; done
    fi
    ((${#hosts[@]} == nodes)) || die "--listen-ips needs $nodes addresses, one per node"
    for ((i = 1; i <= nodes; i++)); do
        ports[i]="$(free_port "${hosts[i - 1]}")"
        cports[i]="$(free_port)"
        voters+="${voters:+,}$i@127.0.0.1:${cports[i]}"
        bootstrap+="${bootstrap:+,}${hosts[i - 1]}:${ports[i]}"
    done
    # 16 random bytes in URL-safe base64 without padding: 22 characters, as Kafka wants.
    cluster_id="$("$PYTHON" -c 'import base64, os; print(base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("="))')"
    local format_args=()
    for f in "${features[@]}"; do format_args+=(--feature "$f"); done
    for ((i = 1; i <= nodes; i++)); do
        local dir="$RUN_DIR/node$i"
        mkdir -p "$dir/data"
        {
            node_properties "$i" "$nodes" "${ports[i]}" "${cports[i]}" "$voters" "${hosts[i - 1]}"
            for kv in "${overrides[@]}"; do echo "$kv"; done
        } >"$dir/server.properties"
        java -cp "$lib/*" -Dlog4j2.configurationFile="$RUN_DIR/log4j2.properties" \
            kafka.tools.StorageTool format --cluster-id "$cluster_id" \
            --config "$dir/server.properties" "${format_args[@]}" >"$dir/format.log" 2>&1 ||
            die "formatting node $i failed: $(tail -n1 "$dir/format.log")"
    done
    echo "$nodes" >"$RUN_DIR/nodes"
    echo "$version" >"$RUN_DIR/version"
    # The jars, for tools run against this cluster's files (Kafka's DumpLogSegments).
    echo "$lib" >"$RUN_DIR/lib"
    for ((i = 1; i <= nodes; i++)); do
        local dir="$RUN_DIR/node$i"
        # stdin/stdout/stderr all redirected so a caller waiting on our pipes is not held.
        nohup java -Xms"$HEAP" -Xmx"$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
            -XX:CICompilerCount=2 -Djava.awt.headless=true \
            -Dlog4j2.configurationFile="$RUN_DIR/log4j2.properties" \
            -cp "$lib/*" kafka.Kafka "$dir/server.properties" \
            </dev/null >"$dir/kafka.log" 2>&1 &
        echo $! >"$dir/pid"
    done
    local deadline=$((started + START_TIMEOUT * 1000)) ready
    while true; do
        for ((i = 1; i <= nodes; i++)); do
            # Alive is enough here: right after the fork the process may not
            # have exec'd java yet, so its command line is not Kafka's.
            if ! kill -0 "$(cat "$RUN_DIR/node$i/pid")" 2>/dev/null; then
                say "node $i exited during start; last lines of $RUN_DIR/node$i/kafka.log:"
                tail -n 15 "$RUN_DIR/node$i/kafka.log" >&2 || true
                cmd_stop >/dev/null 2>&1 || true
                die "Kafka $version node $i did not start"
            fi
        done
        ready=1
        for ((i = 1; i <= nodes; i++)); do
            "$PYTHON" "$SCRIPT_DIR/kafka_ping.py" --timeout 1 --brokers "$nodes" \
                "${hosts[i - 1]}:${ports[i]}" 2>/dev/null || { ready=0; break; }
        done
        ((ready)) && break
        if (($(now_ms) > deadline)); then
            cmd_stop >/dev/null 2>&1 || true
            die "Kafka $version ($nodes node(s)) did not answer within ${START_TIMEOUT}s (logs: $RUN_DIR/node*/kafka.log)"
        fi
        sleep 0.2 # poll interval of a bounded readiness loop, not synchronisation
    done
    echo "$bootstrap" >"$RUN_DIR/bootstrap"
    say "Apache Kafka $version, $nodes node(s), ready in $(($(now_ms) - started)) ms at $bootstrap (run dir $RUN_DIR)"
    echo "KAFKA_BOOTSTRAP=$bootstrap"
}

cmd_stop() {
    local n i pid pids=() started
    n="$(node_count)"
    started=$(now_ms)
    for ((i = 1; i <= n; i++)); do
        if pid="$(node_pid "$i")"; then
            kill "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    if ((${#pids[@]} == 0)); then
        say "no Kafka node running (run dir $RUN_DIR)"
        return 0
    fi
    # A controlled shutdown of the last nodes of a quorum can wait for a controller that is
    # already gone; 20 s is plenty for a clean exit, after that the data does not matter.
    local deadline=$((started + 20000)) alive
    while true; do
        alive=()
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive+=("$pid"); done
        ((${#alive[@]} == 0)) && break
        if (($(now_ms) > deadline)); then
            say "node(s) ${alive[*]} ignored SIGTERM for 20 s; sending SIGKILL"
            kill -9 "${alive[@]}" 2>/dev/null || true
            break
        fi
        sleep 0.1 # poll interval of a bounded shutdown wait
    done
    rm -f "$RUN_DIR/bootstrap"
    say "stopped ${#pids[@]} node(s) in $(($(now_ms) - started)) ms"
}

cmd_status() {
    local n running
    n="$(node_count)"
    running="$(running_nodes)"
    if ((running == 0)); then
        say "not running (run dir $RUN_DIR)"
        return 1
    fi
    say "running: $running of $n node(s), Kafka $(cat "$RUN_DIR/version" 2>/dev/null), at $(cat "$RUN_DIR/bootstrap" 2>/dev/null)"
    echo "KAFKA_BOOTSTRAP=$(cat "$RUN_DIR/bootstrap" 2>/dev/null)"
}

cmd_logs() {
    local i="${1:-1}"
    tail -n 40 "$RUN_DIR/node$i/kafka.log"
}

usage() {
    sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

case "${1:-}" in
install)
    shift
    version="$DEFAULT_VERSION"
    [[ "${1:-}" == --version ]] && version="${2:?--version needs a Kafka version}"
    cmd_install "$version"
    ;;
start) shift; cmd_start "$@" ;;
stop) cmd_stop ;;
status) cmd_status ;;
logs) cmd_logs "${2:-1}" ;;
*) usage ;;
esac

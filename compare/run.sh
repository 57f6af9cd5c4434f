#!/usr/bin/env bash
# Weir against Kafka Streams 4.4, one scenario, with everything it needs:
#
#   compare/run.sh deploy  [deploy.py flags]    latency through a deploy (keep-state, empty-state, kill-all)
#   compare/run.sh cost    [cost.py flags]      records/s, CPU per record, peak RSS
#   compare/run.sh zombies [zombies.py flags]   zombie members under at-least-once (as root)
#   compare/run.sh dirty   [dirty.py flags]     aborted writes and standbys under exactly-once (dedup)
#
# Builds Weir's examples (release; WEIR_COMPARE_PROFILE=debug for a quick look) and the
# Kafka Streams apps (compare/kafka-streams/build.sh), sets up the Python clients
# (scripts/pyenv.sh), and runs compare/SCENARIO.py. deploy and cost run on the cluster at
# $KAFKA_BOOTSTRAP, or else start Apache Kafka 4.4 with three nodes (scripts/kafka.sh) and
# stop it after; zombies starts its own, on a bridge its network namespaces reach.
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$DIR/.." && pwd)"
PROFILE="${WEIR_COMPARE_PROFILE:-release}"
SCENARIO="${1:-}"
case "$SCENARIO" in
deploy | cost | zombies | dirty) shift ;;
*)
    echo "run.sh: name a scenario: deploy, cost, zombies or dirty (got '${SCENARIO}')" >&2
    exit 2
    ;;
esac

if [[ "$PROFILE" == release ]]; then
    cargo build --release -p weir-streams --examples >&2
else
    cargo build -p weir-streams --examples >&2
fi
BIN="${CARGO_TARGET_DIR:-$REPO/target}/$PROFILE"
CP="$("$DIR/kafka-streams/build.sh")"
PY="$("$REPO/scripts/pyenv.sh")"
ARGS=(--weir-bin "$BIN" --ks-classpath "$CP")

RUN_DIR=""
if [[ "$SCENARIO" != zombies ]]; then
    if [[ -z "${KAFKA_BOOTSTRAP:-}" ]]; then
        mkdir -p "$REPO/.weir-kafka"
        RUN_DIR="$(mktemp -d "$REPO/.weir-kafka/compare-run.XXXXXX")"
        trap 'WEIR_KAFKA_RUN_DIR="$RUN_DIR" "$REPO/scripts/kafka.sh" stop || true; rm -rf "$RUN_DIR"' EXIT
        out="$(WEIR_KAFKA_RUN_DIR="$RUN_DIR" "$REPO/scripts/kafka.sh" start --nodes 3)"
        KAFKA_BOOTSTRAP="${out#KAFKA_BOOTSTRAP=}"
    fi
    ARGS+=(--bootstrap "$KAFKA_BOOTSTRAP")
fi
"$PY" "$DIR/$SCENARIO.py" "${ARGS[@]}" "$@"

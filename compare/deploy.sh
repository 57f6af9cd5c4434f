#!/usr/bin/env bash
# Weir against Kafka Streams through a deploy (compare/deploy.py), with everything it needs:
#
#   compare/deploy.sh [deploy.py flags: --runs N --strategy keep-state|empty-state|kill-all ...]
#
# Builds Weir's examples (release; WEIR_COMPARE_PROFILE=debug for a quick look) and the
# Kafka Streams apps (compare/kafka-streams/build.sh), sets up the Python clients
# (scripts/pyenv.sh), and runs on the cluster at $KAFKA_BOOTSTRAP, or else starts Apache
# Kafka 4.4 with three nodes (scripts/kafka.sh) for the run and stops it after.
set -euo pipefail
DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$DIR/.." && pwd)"
PROFILE="${WEIR_COMPARE_PROFILE:-release}"

if [[ "$PROFILE" == release ]]; then
    cargo build --release -p weir-streams --examples >&2
else
    cargo build -p weir-streams --examples >&2
fi
BIN="${CARGO_TARGET_DIR:-$REPO/target}/$PROFILE"
CP="$("$DIR/kafka-streams/build.sh")"
PY="$("$REPO/scripts/pyenv.sh")"

RUN_DIR=""
if [[ -z "${KAFKA_BOOTSTRAP:-}" ]]; then
    mkdir -p "$REPO/.weir-kafka"
    RUN_DIR="$(mktemp -d "$REPO/.weir-kafka/compare-run.XXXXXX")"
    trap 'WEIR_KAFKA_RUN_DIR="$RUN_DIR" "$REPO/scripts/kafka.sh" stop || true; rm -rf "$RUN_DIR"' EXIT
    out="$(WEIR_KAFKA_RUN_DIR="$RUN_DIR" "$REPO/scripts/kafka.sh" start --nodes 3)"
    KAFKA_BOOTSTRAP="${out#KAFKA_BOOTSTRAP=}"
fi
"$PY" "$DIR/deploy.py" --bootstrap "$KAFKA_BOOTSTRAP" --weir-bin "$BIN" --ks-classpath "$CP" "$@"

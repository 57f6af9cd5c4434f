#!/usr/bin/env bash
# Zombie members under at-least-once, Weir against Kafka Streams (compare/zombies.py), with
# everything it needs; as root (network namespaces):
#
#   compare/zombies.sh [zombies.py flags: --runs N --fault cut|stop --instances 2 --threads 3 ...]
#
# Builds Weir's examples (release; WEIR_COMPARE_PROFILE=debug for a quick look) and the
# Kafka Streams apps, sets up the Python clients, and runs; zombies.py starts its own
# three-node Kafka 4.4 on a bridge the namespaces reach, and removes both at the end.
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
exec "$PY" "$DIR/zombies.py" --weir-bin "$BIN" --ks-classpath "$CP" "$@"

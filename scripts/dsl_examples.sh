#!/usr/bin/env bash
# The weir-streams DSL examples' self-checks: each runs its application on an embedded
# cluster (weir-testkit over TCP) under exactly-once, crashes one of its instances mid-run,
# and checks its own output (page views per minute with hopping windows and suppression,
# orders enriched by a customer table, a session activity report).
#
#   scripts/dsl_examples.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p weir-streams --examples
BIN="${CARGO_TARGET_DIR:-target}/debug/examples"
for example in pageviews orders sessions; do
    echo "dsl_examples: $example check" >&2
    "$BIN/$example" check
done

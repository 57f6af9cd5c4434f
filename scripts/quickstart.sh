#!/usr/bin/env bash
# Weir's quickstart: the word count on the weir-streams runtime, over an
# embedded Kafka cluster: two instances, one crashed and replaced mid-run.
#
#   scripts/quickstart.sh [--sentences N] [--state-dir DIR] [--guarantee exactly-once|at-least-once]
#
# Needs only the Rust toolchain: the cluster is weir-testkit, in-process, on
# 127.0.0.1. The demo checks its own result (output and stores against a
# recount of the input) and exits non-zero on a mismatch.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v cargo >/dev/null || { echo "quickstart: cargo not found: install Rust with rustup first" >&2; exit 1; }
exec cargo run --release --quiet -p weir-cli --bin weir -- demo "$@"

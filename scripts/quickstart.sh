#!/usr/bin/env bash
# Weir's quickstart: a stateful word count on an embedded Kafka cluster.
#
#   scripts/quickstart.sh [--sentences N] [--state-dir DIR]
#
# Needs only the Rust toolchain: the cluster is weir-testkit, in-process, on
# 127.0.0.1. The demo checks its own result and exits non-zero on a mismatch.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v cargo >/dev/null || { echo "quickstart: cargo not found: install Rust with rustup first" >&2; exit 1; }
exec cargo run --release --quiet -p weir-cli --bin weir -- demo "$@"

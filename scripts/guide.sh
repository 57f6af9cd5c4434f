#!/usr/bin/env bash
# The user guide: checks the configuration reference against the code, checks that every
# relative link in the Markdown resolves, and builds the book (docs/guide) with mdBook.
#
#   scripts/guide.sh [OUT_DIR]      OUT_DIR defaults to ${CARGO_TARGET_DIR:-target}/guide
#
# Cost: the two checks and the build take about a second together. Only the first run on a
# machine without mdbook costs more: it is installed from crates.io with `cargo install`
# (about 2 minutes of compiling on 2 cores, once; CI machines keep ~/.cargo/bin).
# Needs python3; mdbook is installed if missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The version the guide is built and checked with; --no-default-features leaves out the
# `serve` and `watch` commands (a web server and a file watcher) the build does not need.
MDBOOK_VERSION=0.5.4

out="${1:-${CARGO_TARGET_DIR:-target}/guide}"

python3 scripts/config_reference.py --check
python3 scripts/check_links.py

if ! command -v mdbook >/dev/null 2>&1; then
    echo "guide: mdbook not found: installing mdbook $MDBOOK_VERSION from crates.io" >&2
    cargo install mdbook --locked --version "$MDBOOK_VERSION" --no-default-features --features search
fi
have="$(mdbook --version)"
case "$have" in
    *"v$MDBOOK_VERSION"*) ;;
    *) echo "guide: using $have (the guide is checked with mdbook v$MDBOOK_VERSION)" >&2 ;;
esac

# mdBook logs every step at INFO; only warnings and errors are worth reading here.
MDBOOK_LOG="${MDBOOK_LOG:-warn}" mdbook build docs/guide --dest-dir "$(realpath -m "$out")"
echo "guide: built $out/index.html"

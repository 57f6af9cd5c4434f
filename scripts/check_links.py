#!/usr/bin/env python3
"""Checks that every relative link in the project's Markdown resolves.

    scripts/check_links.py

Reads README.md, every other README.md, everything under docs/ (the user guide
included) and benches/results/. A link to a file or folder must exist; a link
with a #fragment into a Markdown file must name one of its headings (GitHub's and
mdBook's heading ids: lower case, punctuation dropped, spaces as hyphens). Links
with a scheme (https:, mailto:) are not followed. Prints one line per broken link
and exits 1 if there is any.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {"target", "vendor", ".git", "node_modules", "book", ".weir-kafka"}

# [text](target "title") and ![alt](target); the target ends at a space or ')'.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files() -> list[Path]:
    files = []
    for path in ROOT.rglob("*.md"):
        rel = path.relative_to(ROOT)
        if any(part in SKIP_DIRS for part in rel.parts):
            continue
        top = rel.parts[0]
        if path.name == "README.md" or top == "docs" or rel.parts[:2] == ("benches", "results"):
            files.append(path)
    return sorted(files)


def strip_code(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, with inline code blanked out."""
    lines = []
    fence = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.lstrip()
        m = re.match(r"(`{3,}|~{3,})", stripped)
        if m:
            if fence is None:
                fence = m.group(1)[0] * len(m.group(1))
            elif stripped.startswith(fence):
                fence = None
            continue
        if fence is None:
            lines.append((number, re.sub(r"(`+)(?:(?!\1).)+?\1", "``", line)))
    return lines


def slug(heading: str) -> str:
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path, cache: dict[Path, set[str]]) -> set[str]:
    if path not in cache:
        found: set[str] = set()
        seen: dict[str, int] = {}
        for _, line in strip_code(path.read_text(encoding="utf-8")):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                base = slug(m.group(1))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def main() -> int:
    cache: dict[Path, set[str]] = {}
    broken = []
    checked = 0
    files = markdown_files()
    for path in files:
        for number, line in strip_code(path.read_text(encoding="utf-8")):
            targets = [m.group(1) for m in INLINE.finditer(line)]
            ref = REFERENCE.match(line)
            if ref:
                targets.append(ref.group(1))
            for target in targets:
                if SCHEME.match(target):
                    continue
                checked += 1
                where = f"{path.relative_to(ROOT)}:{number}"
                file_part, _, fragment = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                if not dest.exists():
                    broken.append(f"{where}: {target}: no such file")
                    continue
                if fragment and dest.suffix == ".md" and fragment not in anchors(dest, cache):
                    broken.append(f"{where}: {target}: no heading with id '{fragment}'")
    for line in broken:
        print(line, file=sys.stderr)
    if broken:
        print(f"check_links: {len(broken)} broken of {checked} relative links", file=sys.stderr)
        return 1
    print(f"check_links: {checked} relative links in {len(files)} Markdown files resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())

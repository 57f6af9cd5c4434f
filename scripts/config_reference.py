#!/usr/bin/env python3
"""Checks that the configuration reference lists exactly the properties the code accepts.

    scripts/config_reference.py --check     exit 1, naming each difference, if the page is stale
    scripts/config_reference.py --list      print the properties found in the code, per section

The property lists are read from the source: the `KEYS` constants of the client's
configs and of the streams config, and the keys `TransactionConfig::split_properties`
matches. The page's tables are read by their section headings. Defaults and meanings are
written by hand from the code; what this script guards is that no property is added to
or removed from the code without the page following.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs/guide/src/operations/configuration.md"

# Page section heading -> where its properties are defined in the code.
SECTIONS = {
    "Every client": ("client/src/config/common.rs", "keys"),
    "Producer": ("client/src/config/producer.rs", "keys"),
    "Transactional producer": ("client/src/transaction/mod.rs", "match_arms"),
    "Consumer": ("client/src/config/consumer.rs", "keys"),
    "Streams": ("streams/src/config.rs", "keys"),
}

KEYS_RE = re.compile(r"\bKEYS\s*:\s*&(?:'static\s+)?\[&(?:'static\s+)?str\]\s*=\s*&\[(.*?)\];", re.S)
STRING_RE = re.compile(r'"([^"\\]+)"')
# `"transactional.id" => ...` inside split_properties.
ARM_RE = re.compile(r'^\s*"([a-z0-9.]+)"\s*=>', re.M)


def code_keys(path: str, how: str) -> list[str]:
    text = (ROOT / path).read_text(encoding="utf-8")
    if how == "keys":
        found = KEYS_RE.findall(text)
        if len(found) != 1:
            sys.exit(f"config_reference: expected one KEYS list in {path}, found {len(found)}")
        return STRING_RE.findall(found[0])
    start = text.find("fn split_properties")
    if start < 0:
        sys.exit(f"config_reference: no split_properties in {path}")
    body = text[start : text.find("\n    }\n", start)]
    return ARM_RE.findall(body)


def page_keys(text: str) -> dict[str, list[str]]:
    """The first-column `property` of every table row, per `## ` section."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections.setdefault(current, [])
            continue
        m = re.match(r"^\|\s*`([^`]+)`\s*\|", line)
        if m and current is not None:
            sections[current].append(m.group(1))
    return sections


def main() -> int:
    mode = sys.argv[1] if len(sys.argv) > 1 else "--check"
    if mode not in ("--check", "--list"):
        print("usage: scripts/config_reference.py [--check|--list]", file=sys.stderr)
        return 2
    wanted = {name: code_keys(*where) for name, where in SECTIONS.items()}
    if mode == "--list":
        for name, keys in wanted.items():
            print(f"{name}: {', '.join(keys)}")
        return 0
    shown = page_keys(PAGE.read_text(encoding="utf-8"))
    problems = []
    for name, keys in wanted.items():
        if name not in shown:
            problems.append(f"section '## {name}' is missing")
            continue
        rows = shown[name]
        for key in keys:
            if key not in rows:
                problems.append(f"{name}: `{key}` is accepted by the code but not documented")
        for key in rows:
            if key not in keys:
                problems.append(f"{name}: `{key}` is documented but the code does not accept it")
        duplicates = {k for k in rows if rows.count(k) > 1}
        for key in sorted(duplicates):
            problems.append(f"{name}: `{key}` is documented twice")
    rel = PAGE.relative_to(ROOT)
    for p in problems:
        print(f"{rel}: {p}", file=sys.stderr)
    if problems:
        print(f"config_reference: {len(problems)} difference(s) between the code and {rel}", file=sys.stderr)
        return 1
    total = sum(len(k) for k in wanted.values())
    print(f"config_reference: {rel} documents all {total} properties the code accepts")
    return 0


if __name__ == "__main__":
    sys.exit(main())

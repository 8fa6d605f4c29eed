"""Reads the JSON of one ``explorer verify --json`` run, prints it as the CLI's table, and checks what CI expects:
its exit status, and that every function and layer of the ``--passing`` files has only passed rows (warnings
allowed: what ``verify`` of those files alone exits 0 on). One run over a folder gives both answers, where two
runs checked the good files and then the folder again.

    python .ci/verify_expect.py RESULTS.json STATUS --expect-status 1 --passing examples/square.py ...

Run it with the interpreter whose ``explorer`` made the results (the names come from its ``discover``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from explorer.checker import discover
from explorer.checker.runner import format_table, summary_line


def names_in(path: str) -> list[str]:
    found = discover.discover(path)
    if found.errors:
        raise SystemExit(f"{path}: {'; '.join(str(error) for error in found.errors)}")
    return [item.name for item in found.functions + found.layers]


def problems(rows: list[dict], status: int, expect_status: int, passing: list[str]) -> list[str]:
    """What differs from the expectation, one line each (nothing: as expected)."""
    found = []
    if status != expect_status:
        found.append(f"verify exited {status}, expected {expect_status}")
    by_op: dict[str, list[dict]] = {}
    for row in rows:
        by_op.setdefault(row["op"], []).append(row)
    for path in passing:
        for name in names_in(path):
            mine = by_op.get(name, [])
            if not mine:
                found.append(f"{path}: no rows for {name} (renamed, or qualified by a clashing name?)")
            failed = [row["check"] for row in mine if not row["passed"]]
            if failed:
                found.append(f"{path}: {name} failed {', '.join(failed)}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python .ci/verify_expect.py")
    parser.add_argument("results", type=Path, help="the stdout of explorer verify --json")
    parser.add_argument("status", type=int, help="its exit status")
    parser.add_argument("--expect-status", type=int, required=True)
    parser.add_argument("--passing", nargs="*", default=[], metavar="FILE", help="files whose items must all pass")
    args = parser.parse_args(argv)
    text = args.results.read_text()
    try:
        rows = json.loads(text)
    except json.JSONDecodeError:
        print(f"{args.results} is not verify's JSON (exit status {args.status}):\n{text[-3000:]}", file=sys.stderr)
        return 1
    if rows:
        table = pd.DataFrame(rows)
        print(format_table(table))
        print(summary_line(table, 0.0).rsplit(" in ", 1)[0])
    found = problems(rows, args.status, args.expect_status, args.passing)
    for line in found:
        print(f"UNEXPECTED: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

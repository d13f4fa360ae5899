"""Replay inputs through a harness without the fuzzer: ``python -m tests.fuzz.replay
HARNESS PATH...`` (files, or folders of them). Prints the traceback of each input that
breaks the harness's invariant; exits 1 if any did. ``tests/fuzz/run.py`` replays the
final corpus with it under coverage.py; run it on a crash artifact to see the crash."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from tests.fuzz.harnesses import HARNESSES


def inputs(paths: list[str]) -> list[Path]:
    found: list[Path] = []
    for given in map(Path, paths):
        found += sorted(p for p in given.iterdir() if p.is_file()) if given.is_dir() else [given]
    return found


def main(argv: list[str]) -> int:
    harness = HARNESSES[argv[1]]
    broken = 0
    for path in inputs(argv[2:]):
        try:
            harness.check(path.read_bytes())
        except Exception:
            broken += 1
            print(f"{path}:", file=sys.stderr)
            traceback.print_exc()
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

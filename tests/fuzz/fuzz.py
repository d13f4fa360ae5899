"""Run one harness under atheris: ``python -m tests.fuzz.fuzz HARNESS [libFuzzer flags] [CORPUS...]``.

The project's modules (and PyYAML, which the config harness parses with) are imported
under atheris' instrumentation, so libFuzzer's coverage counts their branches.
``tests/fuzz/run.py`` sets the flags and corpora; this is what it starts.
"""

from __future__ import annotations

import sys

import atheris

_INSTRUMENTED = ["collectors", "monitor", "detectors", "yaml", "urllib"]


def main(argv: list[str]) -> None:
    name, flags = argv[1], argv[2:]
    with atheris.instrument_imports(include=_INSTRUMENTED):
        from tests.fuzz.harnesses import HARNESSES
    harness = HARNESSES[name]
    harness.check(b"")  # build the harness's state before the first counted input
    atheris.Setup([argv[0], *flags], harness.check)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)

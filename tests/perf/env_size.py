"""Installed size of the core package's dependencies against the core plus an extra.

A script, not a pytest test::

    python tests/perf/env_size.py                       # core vs core + [hhem]
    python tests/perf/env_size.py --extras hhem alibi phoenix report

It reads the requirements from pyproject.toml, resolves their dependency closure
through the distributions installed in this environment (the repository's venv, which
holds every extra: .ci/run), and sums the sizes on disk of each distribution's files as
its RECORD lists them. Versions are those installed here; a fresh venv resolves the same
requirements, so its sizes differ by what other versions weigh. pip, setuptools and
Python itself are left out. It prints one JSON object: per environment the number of
distributions, their megabytes (10^6 bytes) and the largest ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from importlib.metadata import Distribution, PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
PROJECT = "rag-monitor"
LARGEST = 8


def _installed(name: str) -> Distribution | None:
    try:
        return distribution(name)
    except PackageNotFoundError:
        return None


def _wanted(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def closure(requirements: list[str], extras: set[str]) -> dict[str, Distribution]:
    """Every installed distribution that ``requirements`` (with ``extras`` of the project)
    reach, by canonical name; a requirement naming this project adds its extras."""
    found: dict[str, Distribution] = {}
    pending = [(Requirement(text), extras) for text in requirements]
    while pending:
        requirement, active = pending.pop()
        if not _wanted(requirement, active):
            continue
        name = canonicalize_name(requirement.name)
        if name == PROJECT:
            pending += [
                (Requirement(text), set(requirement.extras)) for text in _extras(requirement.extras)
            ]
            continue
        if name in found:
            continue
        dist = _installed(name)
        if dist is None:
            raise SystemExit(f"{name} is not installed here: run `pip install -e '.[all]'` first")
        found[name] = dist
        pending += [(Requirement(text), set(requirement.extras)) for text in dist.requires or ()]
    return found


def _extras(names: set[str]) -> list[str]:
    optional = _pyproject()["optional-dependencies"]
    return [text for name in sorted(names) for text in optional[name]]


def _pyproject() -> dict[str, object]:
    with (REPO / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def size_bytes(dist: Distribution) -> int:
    """The distribution's files on disk, as its RECORD lists them."""
    total = 0
    for file in dist.files or ():
        path = Path(str(dist.locate_file(file)))
        if path.is_file():
            total += path.stat().st_size
    return total


def describe(dists: dict[str, Distribution]) -> dict[str, object]:
    sizes = {name: size_bytes(dist) for name, dist in dists.items()}
    largest = sorted(sizes.items(), key=lambda item: -item[1])[:LARGEST]
    return {
        "distributions": len(sizes),
        "mb": round(sum(sizes.values()) / 1e6, 1),
        "largest_mb": {name: round(size / 1e6, 1) for name, size in largest},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extras", nargs="+", default=["hhem"], help="extras to compare")
    args = parser.parse_args(argv)
    core_requirements = list(_pyproject()["dependencies"])  # type: ignore[call-overload]
    core = closure(core_requirements, set())
    report: dict[str, object] = {"core": describe(core)}
    for extra in args.extras:
        with_extra = closure([*core_requirements, *_extras({extra})], set())
        added = {name: dist for name, dist in with_extra.items() if name not in core}
        report[f"core+[{extra}]"] = describe(with_extra) | {"added": describe(added)}
    json.dump(report, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

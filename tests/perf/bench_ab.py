"""A/B of the intake path: the working tree's sidecar against REF's, on the same traces.

A script, not a pytest test (pytest does not collect ``bench_*.py``)::

    python tests/perf/bench_ab.py 82faa8a                     # 4 rounds, about a minute
    python tests/perf/bench_ab.py main --rounds 6 --detectors default

Run it when a change touches the intake path (collectors, the pipeline, the inline
detectors); the closing note of the change gives its ratio.

Each round sends the same pre-encoded OTLP/HTTP bodies (bench_ingest's traffic: 4-span
OpenInference traces, 5 documents of about 1 KB each, ``--spans-per-request`` spans a
body, fresh trace ids every round) to both sidecars, one after the other, the order
alternating from round to round so that neither side always runs on a warmer or a
quieter machine. Per side and round it reads the sidecar process's CPU time from /proc
(all its threads) and the wall time until ``rag_requests_total`` counts every trace
(polled every 0.2 s, so a wall figure is good to about 0.2 s a round). It
prints one JSON object: each side's rounds, their medians and range, and ``ratio``: the
working tree's median spans per CPU-second over REF's (above 1: the working tree is
cheaper), with the paired per-round ratios beside it.

How REF runs: ``git archive`` writes REF's files into a temporary directory (nothing is
registered in the repository, so an interrupted run leaves nothing behind there), and
its sidecar runs on this interpreter and its installed packages with ``PYTHONPATH`` set
to REF's tree. The components (detectors, collectors, commands) are registered through
entry points, which come from package metadata, not from the code: so each side also gets
its own tree's metadata, made by the build backend (``prepare_metadata_for_build_wheel``,
no build, nothing written into the tree) and placed on ``PYTHONPATH`` after the tree,
where it takes precedence over the installed copy's. The working tree runs the same way,
so neither side depends on which checkout the environment was installed from. REF's
requirements (and the working tree's) must hold in this environment: they are checked
first and the run stops naming any that do not; a commit that needs other packages is
compared from a venv that has them. The sidecar config is bench_ingest's; where REF's
config has a key at an older place (``monitor.runtime.config_loading.MOVED_KEYS``), REF's
``check-config`` decides which layout it gets.
"""

from __future__ import annotations

import argparse
import email
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402
from packaging.requirements import Requirement  # noqa: E402

from monitor.runtime.config_loading import MOVED_KEYS  # noqa: E402
from tests.conftest import SidecarProcess, free_port  # noqa: E402
from tests.perf.bench_ingest import (  # noqa: E402
    SPANS_PER_TRACE,
    cpu_times,
    encode_requests,
    running,
    send_all,
    sidecar_config,
    traces_in,
    wait_for_count,
)

WORKING_TREE = "working tree"
# A scrape of /metrics costs the sidecar about 5 ms of CPU: polled every 50 ms while the
# pipeline catches up, it would add to the side that finishes later (noise, not intake).
POLL_S = 0.2


@dataclass
class Side:
    """One sidecar under test: the tree it runs from and what it measured."""

    name: str
    tree: Path
    environment: dict[str, str]
    rounds: list[dict[str, Any]] = field(default_factory=list)
    sidecar: SidecarProcess | None = None
    port: int = 0


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()


def export_tree(ref: str, directory: Path) -> Path:
    """REF's committed files in ``directory``."""
    directory.mkdir()
    archive = subprocess.run(
        ["git", "archive", "--format=tar", ref], cwd=REPO, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(directory)], input=archive, check=True)
    return directory


def package_metadata(tree: Path, directory: Path) -> Path:
    """The tree's ``.dist-info`` (entry points, requirements), made by its build backend."""
    directory.mkdir()
    made = subprocess.run(
        [sys.executable, "-c",
         "import sys; from setuptools import build_meta; "
         "print(build_meta.prepare_metadata_for_build_wheel(sys.argv[1]))", str(directory)],
        cwd=tree, check=True, capture_output=True, text=True,
    ).stdout.split()[-1]  # fmt: skip
    for other in directory.iterdir():  # the backend's egg-info: a second copy of the same
        if other.name != made:
            shutil.rmtree(other)
    return directory / made


def unmet_requirements(dist_info: Path) -> list[str]:
    """The tree's requirements (extras aside) that this environment does not satisfy."""
    metadata = email.message_from_string((dist_info / "METADATA").read_text())
    unmet = []
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            unmet.append(f"{requirement} (not installed)")
            continue
        if not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{requirement} ({version} installed)")
    return unmet


def prepare_side(name: str, tree: Path, directory: Path) -> Side:
    dist_info = package_metadata(tree, directory / "metadata")
    unmet = unmet_requirements(dist_info)
    if unmet:
        raise SystemExit(f"{name}: this environment lacks " + "; ".join(unmet))
    path = os.pathsep.join([str(tree), str(dist_info.parent)])
    return Side(name, tree, {"PYTHONPATH": path})


def older_layout(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with every key that moved (``MOVED_KEYS``) back at its old place."""
    raw = json.loads(json.dumps(raw))
    for old, new in MOVED_KEYS.items():
        value = _pop(raw, new.split("."))
        if value is not None:
            *parents, last = old.split(".")
            node = raw
            for key in parents:
                node = node.setdefault(key, {})
            node[last] = value
    return raw


def _pop(raw: dict[str, Any], keys: list[str]) -> Any:
    """The value at ``keys``, taken out of ``raw``, with the sections it leaves empty."""
    first, *rest = keys
    node = raw.get(first)
    if not rest:
        return raw.pop(first, None)
    if not isinstance(node, dict):
        return None
    value = _pop(node, rest)
    if not node:
        del raw[first]
    return value


def accepted_config(side: Side, sidecar: SidecarProcess) -> None:
    """Leave the sidecar's config file in a layout its tree's ``check-config`` accepts."""
    path = sidecar.config_path
    current = yaml.safe_load(path.read_text())
    problems = []
    for raw in (current, older_layout(current)):
        path.write_text(yaml.safe_dump(raw))
        checked = subprocess.run(
            [sys.executable, "-m", "monitor", "check-config", str(path)],
            cwd=side.tree, env=sidecar.environment, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if checked.returncode == 0:
            return
        problems.append(checked.stdout + checked.stderr)
    raise SystemExit(f"{side.name} refuses the config:\n" + "\n".join(problems))


def start_side(stack: ExitStack, side: Side, directory: Path, detectors: str) -> None:
    side.port = free_port()
    config = sidecar_config(http_port=side.port)
    if detectors == "default":
        del config["detectors"]
    place = directory / side.name.replace(" ", "-")
    place.mkdir()
    sidecar = SidecarProcess(place, config, "sidecar", tree=side.tree,
                             environment=side.environment)  # fmt: skip
    accepted_config(side, sidecar)
    side.sidecar = stack.enter_context(running(sidecar))


def measure(side: Side, bodies: Sequence[bytes], traces_before: int, senders: int) -> int:
    """Send ``bodies`` to the side's sidecar and record the round; returns its trace count."""
    sidecar = side.sidecar
    assert sidecar is not None
    assert sidecar.process is not None
    per_request = traces_in(bodies[0])
    traces = traces_before + len(bodies) * per_request
    user_before, system_before = cpu_times(sidecar.process.pid)
    start = time.monotonic()
    send_all(side.port, bodies, senders)
    end = wait_for_count(sidecar, traces, "rag_requests_total", POLL_S, source="otlp")
    user, system = cpu_times(sidecar.process.pid)
    cpu = user - user_before + system - system_before
    spans = len(bodies) * per_request * SPANS_PER_TRACE
    side.rounds.append({
        "spans": spans,
        "elapsed_s": round(end - start, 3),
        "spans_per_s": round(spans / (end - start)),
        "cpu_s": round(cpu, 2),
        "cpu_us_per_span": round(cpu / spans * 1e6, 1),
        "spans_per_cpu_s": round(spans / cpu),
    })  # fmt: skip
    return traces


def summary(side: Side) -> dict[str, Any]:
    def median_and_range(key: str) -> dict[str, float]:
        values = [r[key] for r in side.rounds]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    assert side.sidecar is not None
    return {
        "tree": side.name,
        "spans_per_cpu_s": median_and_range("spans_per_cpu_s"),
        "cpu_us_per_span": median_and_range("cpu_us_per_span"),
        "spans_per_s": median_and_range("spans_per_s"),
        "detector_errors": side.sidecar.metric("rag_monitor_detector_errors_total"),
        "rounds": side.rounds,
    }


def alternate(sides: Sequence[Side], round_number: int) -> Iterator[Side]:
    """Both sides, in turn: REF first in odd rounds, the working tree first in even ones."""
    yield from sides if round_number % 2 else reversed(sides)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("ref", help="the commit to compare the working tree with")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    parser.add_argument("--spans", type=int, default=40_000, help="spans per side and round")
    parser.add_argument(
        "--spans-per-request", type=int, default=200, help="spans per OTLP/HTTP body (50 traces)"
    )
    parser.add_argument("--senders", type=int, default=2, help="OTLP sender processes")
    parser.add_argument(
        "--detectors",
        choices=("inline", "default"),
        default="inline",
        help="inline: faithfulness and drift off (bench_ingest's); default: as each tree's "
        "default config has them",
    )
    args = parser.parse_args(argv)

    commit = git("rev-parse", "--verify", f"{args.ref}^{{commit}}")
    head = git("rev-parse", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    label = commit[:7] if commit.startswith(args.ref) else f"{args.ref} ({commit[:7]})"
    traces = args.spans // SPANS_PER_TRACE
    # Encoded before any sidecar starts: the encoding's CPU is no part of either figure.
    warm_up = encode_requests(1, args.spans_per_request, seed=0)
    rounds = [encode_requests(traces, args.spans_per_request, seed=n)
              for n in range(1, args.rounds + 1)]  # fmt: skip
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp, ExitStack() as stack:
        directory = Path(tmp)
        ref_tree = export_tree(commit, directory / "ref-tree")
        (directory / "ref").mkdir()
        (directory / "work").mkdir()
        sides = [
            prepare_side(label, ref_tree, directory / "ref"),
            prepare_side(WORKING_TREE, REPO, directory / "work"),
        ]
        for side in sides:
            start_side(stack, side, directory, args.detectors)
        counted = {side.name: 0 for side in sides}
        for side in sides:
            assert side.sidecar is not None
            side.sidecar.wait_ready()
            send_all(side.port, warm_up, 1)
            counted[side.name] = len(warm_up) * traces_in(warm_up[0])
            wait_for_count(side.sidecar, counted[side.name], "rag_requests_total", source="otlp")
        for number, bodies in enumerate(rounds, start=1):
            for side in alternate(sides, number):
                counted[side.name] = measure(side, bodies, counted[side.name], args.senders)
        ref, work = (summary(side) for side in sides)
    pairs = [w["spans_per_cpu_s"] / r["spans_per_cpu_s"]
             for r, w in zip(ref["rounds"], work["rounds"], strict=True)]  # fmt: skip
    figures = {
        "ref": ref,
        "working_tree": work | {"head": head[:7], "uncommitted_changes": dirty},
        "ratio": round(work["spans_per_cpu_s"]["median"] / ref["spans_per_cpu_s"]["median"], 3),
        "round_ratios": [round(pair, 3) for pair in pairs],
        "spans_per_round": ref["rounds"][0]["spans"],
        "spans_per_request": args.spans_per_request,
        "detectors": args.detectors,
        "cpus": os.cpu_count(),
        "load_average_1m": {"before": round(load_before[0], 2),
                            "after": round(os.getloadavg()[0], 2)},
    }  # fmt: skip
    print(json.dumps(figures, indent=2))
    print(
        f"spans per sidecar CPU-second: {WORKING_TREE} {work['spans_per_cpu_s']['median']:.0f}"
        f" / {ref['tree']} {ref['spans_per_cpu_s']['median']:.0f} = {figures['ratio']:.2f}x"
        f" (rounds {min(pairs):.2f}-{max(pairs):.2f}x)",
        file=sys.stderr,
    )
    return figures


if __name__ == "__main__":
    main()

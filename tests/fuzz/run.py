"""Run the fuzz harnesses for a while (outside CI) and print what each did.

    python tests/fuzz/run.py                       # every harness, 10 min or 1M runs each
    python tests/fuzz/run.py labels --seconds 60   # one harness, a minute
    python tests/fuzz/run.py --seconds 5 --no-coverage

Each harness runs in its own process (``tests/fuzz/fuzz.py``) with the bounds of
``tests/fuzz/harnesses.py`` (``-timeout``, ``-rss_limit_mb``, ``-max_len``), one after
the other. Its corpus grows under ``--work`` (not in the repository), seeded from
``tests/fuzz/corpus/<harness>/`` and the crash inputs kept in
``tests/fuzz/regressions/<harness>/``; crash, timeout and out-of-memory inputs land in
``--work``/<harness>/artifacts/. Printed per harness: executions, executions a second,
libFuzzer's coverage (``cov``: edges, ``ft``: features), the peak memory, the slowest
input, the artifacts found, and (unless ``--no-coverage``) the line coverage of its decoding modules when
the final corpus is replayed under coverage.py; last, each module's line coverage by
all the harnesses run together. ``--replay-only`` prints the coverage without fuzzing.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: the project and tests import from the root
    sys.path.insert(0, str(ROOT))

from tests.fuzz.harnesses import HARNESSES, RSS_LIMIT_MB, TIMEOUT_S, Harness  # noqa: E402

FUZZ = Path(__file__).resolve().parent
SEEDS = FUZZ / "corpus"
REGRESSIONS = FUZZ / "regressions"
_STAT = re.compile(r"^stat::(\w+):\s+(\d+)", re.MULTILINE)
_COVERAGE = re.compile(r"cov: (\d+) ft: (\d+)")
_ARTIFACT = ("crash-", "timeout-", "oom-", "leak-", "slow-unit-")


@dataclass
class Outcome:
    name: str
    returncode: int
    executions: int
    exec_per_s: int
    cov: int
    ft: int
    peak_rss_mb: int
    slowest_s: int  # the slowest input, whole seconds
    corpus: int
    artifacts: list[Path]


# libFuzzer's -rss_limit_mb reads the process's peak RSS (getrusage), which Linux carries
# from the parent through fork and exec: started from a test session of 1 GB, every run
# was "out of memory" before its first input. A shell that forks the fuzzer (it cannot
# exec it: a command follows) starts it with the shell's own small peak.
_FRESH_PEAK = ("/bin/sh", "-c", '"$@"; exit $?', "fuzz")


def fuzz(harness: Harness, work: Path, seconds: int, runs: int) -> Outcome:
    """Run one harness under libFuzzer; its figures from the final stats and the log."""
    corpus, artifacts = work / harness.name / "corpus", work / harness.name / "artifacts"
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(parents=True, exist_ok=True)
    inputs = [d for d in (SEEDS / harness.name, REGRESSIONS / harness.name) if d.is_dir()]
    command = [
        sys.executable, "-m", "tests.fuzz.fuzz", harness.name,
        f"-max_total_time={seconds}", f"-runs={runs}", f"-timeout={TIMEOUT_S}",
        f"-rss_limit_mb={RSS_LIMIT_MB}", f"-max_len={harness.max_len}",
        f"-artifact_prefix={artifacts}/", "-print_final_stats=1",
        str(corpus), *map(str, inputs),
    ]  # fmt: skip
    log = work / harness.name / "fuzz.log"
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("w") as out:
        finished = subprocess.run(
            [*_FRESH_PEAK, *command], cwd=ROOT, env=environment, stdout=out, stderr=out,
            check=False,
        )  # fmt: skip
    text = log.read_text(errors="replace")
    stats = {key: int(value) for key, value in _STAT.findall(text)}
    coverage = _COVERAGE.findall(text)
    cov, ft = map(int, coverage[-1]) if coverage else (0, 0)
    found = sorted(p for p in artifacts.iterdir() if p.name.startswith(_ARTIFACT))
    return Outcome(
        harness.name,
        finished.returncode,
        stats.get("number_of_executed_units", 0),
        stats.get("average_exec_per_sec", 0),
        cov,
        ft,
        stats.get("peak_rss_mb", 0),
        stats.get("slowest_unit_time_sec", 0),
        sum(1 for _ in corpus.iterdir()),
        found,
    )


Lines = dict[str, tuple[set[int], set[int]]]  # module: (lines run, its statements)


def line_coverage(harness: Harness, corpus: list[Path]) -> Lines:
    """Replay ``corpus`` under coverage.py: per decoding module, the lines it ran and the
    module's statements (the crashing inputs among them are ``fuzz``'s to report)."""
    import coverage

    files = {module.__name__: str(module.__file__) for module in harness.modules}
    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / ".coverage"
        # A fresh interpreter: the modules must be imported after coverage starts.
        subprocess.run(
            [sys.executable, "-m", "coverage", "run", f"--data-file={data}",
             f"--include={','.join(files.values())}", "-m", "tests.fuzz.replay", harness.name,
             *(str(d) for d in corpus if d.is_dir())],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.DEVNULL,
            check=False,
        )  # fmt: skip
        measured = coverage.Coverage(data_file=str(data))
        measured.load()
        lines: Lines = {}
        for module, path in files.items():
            _, statements, _, missing, _ = measured.analysis2(path)
            lines[module] = (set(statements) - set(missing), set(statements))
    return lines


def _share(run: set[int], statements: set[int]) -> str:
    return f"{100 * len(run) / max(len(statements), 1):.0f}%"


def _print(outcome: Outcome, lines: Lines) -> None:
    print(
        f"{outcome.name} ({HARNESSES[outcome.name].entry}): {outcome.executions} executions, "
        f"{outcome.exec_per_s} exec/s, cov {outcome.cov}, ft {outcome.ft}, "
        f"corpus {outcome.corpus}, peak rss {outcome.peak_rss_mb} MB, "
        f"slowest input {outcome.slowest_s} s, exit {outcome.returncode}, "
        f"artifacts {len(outcome.artifacts)}"
    )
    for path in outcome.artifacts:
        print(f"  artifact: {path}")
    for module, (run, statements) in lines.items():
        print(f"  lines run: {module} {_share(run, statements)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("harnesses", nargs="*", choices=[[], *HARNESSES], metavar="HARNESS",
                        help=f"default: all ({', '.join(HARNESSES)})")  # fmt: skip
    parser.add_argument("--seconds", type=int, default=600, help="per harness (600)")
    parser.add_argument("--runs", type=int, default=1_000_000, help="per harness (1000000)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "rag-fuzz",
                        help="grown corpora, logs and artifacts")  # fmt: skip
    parser.add_argument("--no-coverage", action="store_true", help="skip the line coverage")
    parser.add_argument("--replay-only", action="store_true",
                        help="no fuzzing: the line coverage of the corpora grown so far")  # fmt: skip
    parser.add_argument("--fresh", action="store_true", help="start from the seeds again")
    args = parser.parse_args(argv)
    failed = False
    union: Lines = {}  # every harness's lines together, per module
    for name in args.harnesses or HARNESSES:
        harness = HARNESSES[name]
        if args.fresh:
            shutil.rmtree(args.work / name, ignore_errors=True)
        outcome = None
        if not args.replay_only:
            outcome = fuzz(harness, args.work, args.seconds, args.runs)
            failed |= outcome.returncode != 0 or bool(outcome.artifacts)
        lines: Lines = {}
        if not args.no_coverage:
            dirs = [args.work / name / "corpus", SEEDS / name, REGRESSIONS / name]
            lines = line_coverage(harness, dirs)
        for module, (run, statements) in lines.items():
            union.setdefault(module, (set(), statements))[0].update(run)
        if outcome is None:
            for module, (run, statements) in lines.items():
                print(f"{name}: lines run: {module} {_share(run, statements)}")
        else:
            _print(outcome, lines)
        sys.stdout.flush()
    for module, (run, statements) in sorted(union.items()):
        print(f"all harnesses: lines run: {module} {_share(run, statements)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

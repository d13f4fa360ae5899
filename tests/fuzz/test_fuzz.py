"""The fuzz harnesses: their seeds and the crash inputs found so far hold the invariant,
and a short run of each under atheris finds no crash, hang or memory breach (the CI smoke;
``tests/fuzz/run.py`` runs them for longer)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.harnesses import HARNESSES, RSS_LIMIT_MB, TIMEOUT_S, Harness
from tests.fuzz.replay import inputs
from tests.fuzz.run import REGRESSIONS, ROOT, SEEDS

SMOKE_S = 3


def _saved(name: str) -> list[Path]:
    return inputs([str(d) for d in (SEEDS / name, REGRESSIONS / name) if d.is_dir()])


@pytest.mark.parametrize("name", HARNESSES)
def test_seeds_and_crash_inputs_return_or_are_refused(name: str) -> None:
    """Every seed and every kept crash input of the harness returns or raises a refusal."""
    saved = _saved(name)
    assert saved, f"no seeds for {name}: run tests/fuzz/seeds.py"
    for path in saved:
        HARNESSES[name].check(path.read_bytes())


def test_an_exception_other_than_a_refusal_breaks_the_invariant() -> None:
    """A harness lets its refusal types pass and raises any other exception."""

    def decode(data: bytes) -> object:
        raise (ValueError if data else KeyError)("decoder")

    harness = Harness("demo", "decode", (ValueError,), lambda: decode)
    harness.check(b"refused")
    with pytest.raises(KeyError):
        harness.check(b"")


@pytest.mark.parametrize("name", HARNESSES)
def test_a_short_fuzzing_run_finds_no_crash(name: str, tmp_path: Path) -> None:
    """A few seconds of coverage-guided fuzzing from the seeds: exit 0, no crash artifact."""
    pytest.importorskip("atheris", reason="the fuzz extra")
    harness = HARNESSES[name]
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seeds = [str(d) for d in (SEEDS / name, REGRESSIONS / name) if d.is_dir()]
    command = [
        sys.executable, "-m", "tests.fuzz.fuzz", name, f"-max_total_time={SMOKE_S}",
        f"-timeout={TIMEOUT_S}", f"-rss_limit_mb={RSS_LIMIT_MB}", f"-max_len={harness.max_len}",
        f"-artifact_prefix={tmp_path}/", str(corpus), *seeds,
    ]  # fmt: skip
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        command, cwd=ROOT, env=environment, capture_output=True, text=True, check=False
    )
    artifacts = [p.name for p in tmp_path.iterdir() if p.is_file()]
    assert not artifacts, run.stderr[-4000:]
    assert run.returncode == 0, run.stderr[-4000:]

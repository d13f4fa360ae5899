"""The fuzz harnesses: their seeds and the crash inputs found so far hold the invariant,
and a short run of each under atheris finds no crash, hang or memory breach (the CI smoke;
``tests/fuzz/run.py`` runs them for longer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz.harnesses import HARNESSES, Harness
from tests.fuzz.replay import inputs
from tests.fuzz.run import REGRESSIONS, SEEDS, fuzz

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
    outcome = fuzz(HARNESSES[name], tmp_path, SMOKE_S, runs=-1)
    log = (tmp_path / name / "fuzz.log").read_text(errors="replace")[-4000:]
    assert outcome.artifacts == [], log
    assert outcome.returncode == 0, log
    assert outcome.executions > 0, log

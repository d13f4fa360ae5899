"""The demo's first run on a machine without the HHEM model (the README's first command):
in a pseudo-terminal, against a Hugging Face Hub double on loopback (``tests/fake_hub.py``)
serving a tiny HHEM checkpoint at the pinned commits, `rag-monitor demo` fetches the
model with progress bars, says where it went, then draws the board with the faithfulness
row scored and its scripted faithfulness incident firing RagFaithfulnessLow; with no hub
answering it says so in one line and runs on.

The checkpoint served is the marked one (``tests/hhem_checkpoint.py``): weights set so
that it scores the demo's healthy answers above the threshold and its stray answers,
which carry digits no context holds, below it: a judge that can tell, as HHEM can."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from demo.answers import STRAY_DIGITS
from demo.service import TIMELINE
from detectors.faithfulness.hhem import DEFAULT_FOUNDATION, HHEM_REPO, PINNED_REVISIONS
from tests.conftest import free_port
from tests.fake_hub import FakeHub, PublishedHhem, hub_environ, publish_hhem, serve_hub
from tests.hhem_checkpoint import build_marked_checkpoint
from tests.integration.test_demo import ANSI, demo_config, run_in_terminal, screens

pytestmark = pytest.mark.integration

CLEAR = b"\x1b[2J"  # the board erases the screen once, after what came before it
SIZE = (160, 50)  # columns x rows: the whole board, with its trend column
FETCH_HOW = "run `rag-monitor models fetch`"
# A number in the faithfulness row's value column (pass share), not "-".
SCORED = re.compile(r"faithfulness \(pass share\) +(\d\.\d{4}) ")
[STRAY] = [incident for incident in TIMELINE if incident.alert == "RagFaithfulnessLow"]
CYCLE_S = 60  # the stray answers from 24 s to 33 s, the view's window 6 s
ELAPSED = re.compile(r"rag-monitor demo · (\d+):(\d\d) into")
MET = re.compile(rf"{STRAY.name}.* -> RagFaithfulnessLow.* met at (\d):(\d\d)")
# The judge on one thread in fp32: on a busy 2-core machine two torch threads run the
# tiny model ten times slower than one, and precision: auto's start-up measurement takes
# a minute there; the judge must keep up with the sampled answers from the start.
JUDGE = {"threads": 1, "precision": "fp32"}


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> PublishedHhem:
    """The marked HHEM checkpoint and its foundation, as the hub double serves them: the
    published layout of the tiny checkpoint, with the marked one's weights."""
    root = tmp_path_factory.mktemp("published")
    checkpoint, model = build_marked_checkpoint(root / "marked", STRAY_DIGITS)
    published = publish_hhem(root)
    weights = (checkpoint / "model.safetensors").read_bytes()
    hhem = {**published.hhem, "model.safetensors": weights}
    return replace(published, hhem=hhem, local_checkpoint=checkpoint, model=model)


def run_demo(
    tmp_path: Path, duration_s: int, faithfulness: dict[str, object] | None = None, **hub: str
) -> tuple[str, list[str]]:
    """`rag-monitor demo --duration` in a pseudo-terminal with an empty Hugging Face cache
    under ``tmp_path``, the ``faithfulness`` settings and the ``hub`` settings: what it
    wrote before the board (escape sequences removed, progress bars' redraws as lines)
    and each screen it drew."""
    config = demo_config(tmp_path)
    if faithfulness:
        document = yaml.safe_load(config.read_text())
        document["detectors"]["faithfulness"] = faithfulness
        config.write_text(yaml.safe_dump(document))
    argv = [sys.executable, "-m", "monitor", "demo", "--config", str(config)]
    argv += ["--duration", str(duration_s)]
    env = hub_environ(tmp_path, **hub)
    status, written = run_in_terminal(argv, duration_s + 60, size=SIZE, env=env)
    assert status == 0, written.decode(errors="replace")[-3000:]
    before, board = written.split(CLEAR, 1)
    text = ANSI.sub(b"", before).decode(errors="replace").replace("\r\n", "\n")
    return text.replace("\r", "\n"), screens(board)


def test_a_missing_model_is_fetched_with_progress_then_scored(
    published: PublishedHhem, tmp_path: Path
) -> None:
    """Before the board: the hub client's progress bars, then one line naming the cache
    the pinned commits went to; the board then scores faithfulness, says of no model
    that it is missing, and shows the stray answers firing RagFaithfulnessLow within
    their incident, never before it."""
    with serve_hub(published.repos()) as (hub, endpoint):
        before, frames = run_demo(tmp_path, CYCLE_S, JUDGE, HF_ENDPOINT=endpoint)
    cache = tmp_path / "cache"
    lines = [line.strip() for line in before.splitlines() if line.strip()]
    assert any(re.match(r"Fetching \d+ files: +100%", line) for line in lines), before
    assert any(re.search(r"model\.safetensors: +100%", line) for line in lines), before
    assert (
        lines[-1]
        == f"fetched {HHEM_REPO}, {DEFAULT_FOUNDATION} into the Hugging Face cache {cache}"
    )
    for repo in (HHEM_REPO, DEFAULT_FOUNDATION):
        snapshot = cache / f"models--{repo.replace('/', '--')}" / "snapshots"
        assert (snapshot / PINNED_REVISIONS[repo] / "config.json").is_file(), repo
    assert _downloaded(hub, HHEM_REPO, "model.safetensors")
    assert not [frame for frame in frames if "model missing" in frame]
    scored = [match for frame in frames if (match := SCORED.search(frame))]
    assert scored, frames[-1]
    assert 0.0 <= float(scored[-1][1]) <= 1.0
    _assert_the_stray_answers_fire(frames)


def _assert_the_stray_answers_fire(frames: list[str]) -> None:
    """The faithfulness row reads BREACH only once the stray answers have started, and
    no more at the end; the incident line says the alert's condition was first met
    while they ran."""
    start_s, end_s = STRAY.start * CYCLE_S, STRAY.end * CYCLE_S
    breached, row = [], ""
    for frame in frames:
        if (at := ELAPSED.search(frame)) is None:
            continue
        row = next(line for line in frame.splitlines() if line.startswith("faithfulness "))
        if "BREACH" in row:
            breached.append(int(at[1]) * 60 + int(at[2]))
    assert breached, "\n\n".join(frames[int(start_s) : int(end_s) + 6])
    assert min(breached) >= start_s, breached
    assert "BREACH" not in row, row
    met = [int(m[1]) * 60 + int(m[2]) for frame in frames if (m := MET.search(frame))]
    assert met, frames[-1]
    assert start_s <= met[0] <= end_s, met


def test_an_unreachable_hub_is_one_line_and_the_demo_runs_on(tmp_path: Path) -> None:
    """Nothing listens at HF_ENDPOINT: one line before the board says the model is missing,
    why it was not fetched and how to fetch it; the board shows the other guardrails'
    values, and the faithfulness row none."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    before, frames = run_demo(tmp_path, 6, HF_ENDPOINT=endpoint)
    [line] = before.strip().splitlines()
    assert line.startswith(f"model missing: faithfulness needs {HHEM_REPO}"), line
    assert f"not fetched: cannot reach {endpoint} (Connection refused)" in line
    assert FETCH_HOW in line
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    last = frames[-1]
    assert re.search(r"cost per query \(mean USD\) +\d\.\d{4} ", last), last
    assert f"model missing: faithfulness needs {HHEM_REPO}" in last
    assert not SCORED.search(last)


def test_hf_hub_offline_asks_nothing_of_the_hub(published: PublishedHhem, tmp_path: Path) -> None:
    """HF_HUB_OFFLINE=1: no request reaches the hub, even one that answers; one line says
    the model is missing and why."""
    with serve_hub(published.repos()) as (hub, endpoint):
        before, _ = run_demo(tmp_path, 3, HF_ENDPOINT=endpoint, HF_HUB_OFFLINE="1")
    [line] = before.strip().splitlines()
    assert "not fetched: HF_HUB_OFFLINE is set" in line
    assert FETCH_HOW in line
    assert hub.requests == []


def _downloaded(hub: FakeHub, repo: str, name: str) -> bool:
    return any(
        request.startswith("GET ")
        and request.endswith(f"/{repo}/resolve/{PINNED_REVISIONS[repo]}/{name}")
        for request in hub.requests
    )

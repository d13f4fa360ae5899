"""The demo's answers and the marked HHEM judge that tells its stray answers apart.

A healthy answer restates its first context; a stray one (the "answers stray from the
sources" incident) carries digits no context holds. The marked checkpoint
(``tests/hhem_checkpoint.build_marked_checkpoint``), loaded by the sidecar's own HHEM
code, scores the first above the threshold and the second below it, as its formula says,
in every precision the judge may pick."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest
import torch

from demo.answers import POLICIES, STRAY_DIGITS, answer, passage
from demo.service import INTENTS, TENANTS, TIMELINE
from demo.view import WINDOW_SHARE
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.hhem import HhemScorer, Precision, read_checkpoint
from tests.hhem_checkpoint import (
    Tiny,
    build_marked_checkpoint,
    marked_score,
    reference_scores,
)

THRESHOLD = FaithfulnessConfig().threshold


def demo_pairs(count: int, stray: bool, seed: int = 1) -> list[tuple[str, str]]:
    """(premise, answer) pairs as the judge gets them from the demo: the texts of the
    three contexts the generator got, blank-line separated, and the answer from the first."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        tenant, intent = rng.choice(TENANTS), rng.choice(INTENTS)
        kind = rng.choice(("doc", "gold"))
        docs = [f"{tenant}-{kind}-{rng.randrange(200)}" for _ in range(3)]
        premise = "\n\n".join(passage(doc, tenant, intent) for doc in docs)
        pairs.append((premise, answer(docs[0], tenant, intent, stray=stray)))
    return pairs


HEALTHY, STRAY = demo_pairs(60, stray=False), demo_pairs(60, stray=True)


@pytest.fixture(scope="module")
def marked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiny]:
    """The marked checkpoint, scored on one torch thread: the tiny model gains nothing from
    two, and loses much on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield build_marked_checkpoint(tmp_path_factory.mktemp("marked"), STRAY_DIGITS)
    finally:
        torch.set_num_threads(threads)


def test_the_timeline_has_the_faithfulness_incident() -> None:
    """The incident fires the faithfulness page, and no two incidents overlap."""
    [stray] = [incident for incident in TIMELINE if incident.alert == "RagFaithfulnessLow"]
    assert stray.name == "answers stray from the sources"
    spans = sorted((i.start, i.end) for i in TIMELINE)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
    # Each outlasts the view's window, by half of it at least.
    assert all(end - start >= 1.5 * WINDOW_SHARE - 1e-9 for start, end in spans)


def test_healthy_answers_restate_a_context_and_stray_ones_carry_foreign_digits() -> None:
    """A healthy answer is its first context's text; a stray one states the same policy
    with digits no context has, and a claim none makes."""
    for (premise, healthy), (stray_premise, stray) in zip(HEALTHY, STRAY, strict=True):
        assert healthy == premise.split("\n\n")[0]
        assert not set(premise) & set(STRAY_DIGITS)
        assert not set(stray_premise) & set(STRAY_DIGITS)
        assert set(stray) & set(STRAY_DIGITS)
        assert stray not in stray_premise
    assert {len(templates) for templates in POLICIES.values()} == {3}
    assert set(POLICIES) == set(INTENTS)


def test_the_marked_judge_scores_as_its_formula_says(marked: Tiny) -> None:
    """Through the sidecar's loader, the scores are the model's own and the formula's:
    healthy answers above the threshold, stray ones below it."""
    directory, model = marked
    scorer = HhemScorer(read_checkpoint(str(directory)))
    markers = set(scorer.tokenizer(STRAY_DIGITS, add_special_tokens=False)["input_ids"])
    pairs = HEALTHY + STRAY
    scores = scorer.score(pairs, batch_size=8)
    assert scores == pytest.approx(reference_scores(model, pairs), abs=1e-5)
    for (premise, hypothesis), score in zip(pairs, scores, strict=True):
        ids = scorer.prepare(premise, hypothesis).input_ids
        found = sum(token in markers for token in ids)
        assert score == pytest.approx(marked_score(found, len(ids)), abs=1e-4)
    healthy, stray = scores[: len(HEALTHY)], scores[len(HEALTHY) :]
    assert min(healthy) > 0.95 > THRESHOLD
    assert max(stray) < 0.05 < THRESHOLD


@pytest.mark.parametrize("precision", [p for p in get_args(Precision) if p != "fp32"])
def test_every_precision_keeps_the_verdicts(marked: Tiny, precision: Precision) -> None:
    """The judge's start-up may pick another precision (``precision: auto``): each keeps
    the scores within 0.01 of fp32, so the verdicts stand."""
    directory, _ = marked
    fp32 = HhemScorer(read_checkpoint(str(directory)))
    pairs = HEALTHY[:10] + STRAY[:10]
    converted = fp32.converted(precision)
    assert converted.score(pairs) == pytest.approx(fp32.score(pairs), abs=0.01)


def test_a_marked_checkpoint_is_the_published_layout(marked: Tiny) -> None:
    """The marked checkpoint is build_checkpoint's layout: config and weights beside each
    other, the foundation named by the config."""
    directory, _ = marked
    assert {p.name for p in Path(directory).iterdir()} == {"config.json", "model.safetensors"}
    assert read_checkpoint(str(directory)).foundation.is_dir()

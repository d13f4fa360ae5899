"""What a sampled trace needs before the model: the outcomes settled without HHEM.

The detector asks this on the pipeline thread, as the sampler takes a trace, so the
scoring queue only ever holds answers HHEM can judge. No score without evidence: an
answer whose contexts carry no text has no premise to be consistent with, and scoring
it against an empty one would count a retrieval or mapping fault as unfaithfulness; a
trace without an answer has no hypothesis. Both are counted, never scored. Answers
that need no evidence to settle (blank, a refusal) keep their own outcomes first.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

from detectors.faithfulness.config import FaithfulnessConfig
from monitor.contract.trace import RagTrace

# scored: HHEM judged it; error: scoring failed. The rest are settled without the model:
# no_answer (the trace has none), no_claims (blank), refusal, no_context
# (no context carries text: nothing to judge the answer against).
Outcome = Literal["scored", "no_answer", "no_claims", "refusal", "no_context", "error"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)
Settled = Literal["no_answer", "no_claims", "refusal", "no_context"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'"})


def premise_of(trace: RagTrace) -> str:
    """The evidence the generator saw: the contexts' texts in order, blank-line separated;
    a context without text (or only whitespace) adds nothing."""
    return "\n\n".join(c.text for c in trace.contexts if c.text and not c.text.isspace())


def split_sentences(answer: str) -> list[str]:
    """Sentences of an answer: split after . ! ? followed by space, and at line breaks."""
    return [s.strip() for s in _SENTENCE_END.split(answer) if s.strip()]


class Triage:
    """Settles the sampled traces the model need not (or must not) see."""

    def __init__(self, config: FaithfulnessConfig) -> None:
        self._refusals = [re.compile(p, re.IGNORECASE) for p in config.refusal_patterns]

    def __call__(self, trace: RagTrace) -> Settled | None:
        """The outcome that settles ``trace`` without the model; None when HHEM scores it."""
        if not trace.answer:
            return "no_answer"
        answer = trace.answer.strip()
        if not answer:  # the only answer without a sentence, for sentence granularity too
            return "no_claims"
        normalized = " ".join(answer.translate(_APOSTROPHES).split())
        if any(pattern.match(normalized) for pattern in self._refusals):
            return "refusal"
        if not premise_of(trace):
            return "no_context"
        return None

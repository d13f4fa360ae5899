"""``judge_identity``: the name each verdict carries, worked out from the configuration
alone (no judge is loaded), so every judge, the scorer and the detector name verdicts
the same way."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from detectors.faithfulness import llm_prompts

if TYPE_CHECKING:
    from detectors.faithfulness.config import FaithfulnessConfig


def judge_identity(config: FaithfulnessConfig) -> str:
    """The judge's identity, from what decides its verdicts: its kind, the model and its
    pinned revision (an LLM judge: the model and a hash of its prompts and schemas), and
    the threshold. Every verdict carries it (the ``judge`` label, ``JudgeScore.judge``);
    reviews correct each identity apart, so a change of any part starts a new
    correction instead of mixing two judges' errors. One value per configuration:
    bounded as a label."""
    threshold = f"t{config.threshold:g}"
    if config.judge == "cascade":
        # Both tiers' identities and the band: which answers get which tier's verdict.
        # The budget and the rate are left out: they change how many answers the second
        # tier judges, not how either tier judges one.
        cascade = config.cascade
        first = judge_identity(config.model_copy(update={"judge": cascade.first}))
        second = judge_identity(config.model_copy(update={"judge": "openai_compatible"}))
        return f"cascade/{first}+{second}/b{cascade.band_low:g}-{cascade.band_high:g}"
    if config.judge == "openai_compatible":
        prompts = json.dumps(
            [
                llm_prompts.EXTRACT_PROMPT,
                llm_prompts.VERIFY_PROMPT,
                llm_prompts.CLAIMS_SCHEMA,
                llm_prompts.VERDICTS_SCHEMA,
                config.llm_judge.max_claims,
            ],
            sort_keys=True,
        )
        digest = hashlib.blake2b(prompts.encode(), digest_size=4).hexdigest()
        return f"llm/{config.llm_judge.model}/p{digest}/{threshold}"
    if config.judge == "token_classifier":
        from detectors.faithfulness import token_classifier

        token = config.token_classifier
        # max_length decides how the evidence is cut into inputs, so the verdicts too.
        length = "" if token.max_length is None else f"/l{token.max_length}"
        version = model_version(token.model, token_classifier.PINNED_REVISIONS)
        return f"token/{version}{length}/{threshold}"
    from detectors.faithfulness.hhem import PINNED_REVISIONS

    granularity = "" if config.granularity == "answer" else f"/{config.granularity}"
    return f"hhem/{model_version(config.model, PINNED_REVISIONS)}{granularity}/{threshold}"


def model_version(model: str, pins: dict[str, str]) -> str:
    """``name@revision`` of a checkpoint: a hub id's last part and its pinned revision's
    first 8 characters (``main`` unpinned), or a directory's name at ``local``."""
    if Path(model).expanduser().is_dir():
        return f"{Path(model).expanduser().resolve().name}@local"
    return f"{model.rsplit('/', 1)[-1]}@{pins.get(model, 'main')[:8]}"

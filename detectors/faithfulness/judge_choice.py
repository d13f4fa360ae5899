"""The faithfulness judges: ``open_judge``, which loads the one ``judge:`` names, and
``judge_identity``, the name each verdict carries.

What a judge is (``Judge``, ``JudgePair``, ``JudgeResult``, ``ErrorKind``) is in
``judge_contract.py``; each judge (``hhem_judge.py``, ``llm_judge.py``) imports that, and only this
module imports the judges: the worker and the scorer open one here. A cascade
(``cascade_judge.py``) opens its first judge here too, as if it were configured alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import threading

    from detectors.faithfulness.config import FaithfulnessConfig
    from detectors.faithfulness.judge_contract import Judge, WorkerStats
    from monitor.contract.sidecar_registry import SidecarRegistry


def open_judge(
    config: FaithfulnessConfig,
    *,
    registry: SidecarRegistry | None,
    on_stats: Callable[[WorkerStats], None],
    stopping: threading.Event,
) -> Judge:
    """Load the configured judge (on the worker's thread: HHEM loads and measures a model).

    Raises ``ModelMissingError`` or ``JudgeUnavailable`` when something must be fetched
    or set first, ``CalibrationCancelled`` when ``stopping`` is set during the measurement.
    """
    if config.judge == "openai_compatible":
        from detectors.faithfulness.llm_judge import load_llm_judge

        return load_llm_judge(config, registry=registry, on_stats=on_stats, stopping=stopping)
    if config.judge == "cascade":
        from detectors.faithfulness.cascade_judge import load_cascade_judge

        return load_cascade_judge(config, registry=registry, on_stats=on_stats, stopping=stopping)
    if config.judge == "token_classifier":
        from detectors.faithfulness.token_judge import load_token_judge

        return load_token_judge(config, registry=registry, on_stats=on_stats, stopping=stopping)
    from detectors.faithfulness.hhem_judge import load_hhem_judge

    return load_hhem_judge(config, registry=registry, on_stats=on_stats, stopping=stopping)


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
        from detectors.faithfulness import llm_judge

        prompts = json.dumps(
            [
                llm_judge.EXTRACT_PROMPT,
                llm_judge.VERIFY_PROMPT,
                llm_judge.CLAIMS_SCHEMA,
                llm_judge.VERDICTS_SCHEMA,
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

"""The judge that runs a model in the judging process (the sidecar inline, or a scorer),
and the extra that model needs: the detector's component and ``rag-monitor score`` both
refuse to start without it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from monitor.contract.extras import require_extra

if TYPE_CHECKING:
    from detectors.faithfulness.config import FaithfulnessConfig


def local_judge(config: FaithfulnessConfig) -> str:
    """The judge kind that runs a model in the judging process: ``judge``, or a cascade's
    first judge (its second is an LLM behind HTTP)."""
    return config.cascade.first if config.judge == "cascade" else config.judge


def judge_setting(config: FaithfulnessConfig) -> str:
    """The setting that puts the local judge here, as an extra's error names it."""
    if config.judge == "cascade":
        return f"judge: cascade, cascade.first: {config.cascade.first}"
    return f"judge: {config.judge}"


# The extra each local judge's model needs (an LLM judge needs none).
LOCAL_JUDGE_EXTRAS = {"hhem": "hhem", "token_classifier": "token-judge"}


def require_local_judge_extra(config: FaithfulnessConfig, instead: str) -> None:
    """``MissingExtraError`` (with ``instead``, what to set instead) when the process that
    judges lacks its local judge's extra."""
    extra = LOCAL_JUDGE_EXTRAS.get(local_judge(config))
    if extra is not None:
        require_extra(extra, f"detectors.faithfulness ({judge_setting(config)})", instead)

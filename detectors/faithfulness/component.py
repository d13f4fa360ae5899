"""The faithfulness detector's registration (``rag_monitor.detectors: faithfulness``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from detectors.faithfulness import alerting
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.hhem import (
    DEFAULT_FOUNDATION,
    PINNED_REVISIONS,
    WEIGHT_FILES,
    ModelMissingError,
    read_checkpoint,
)
from detectors.faithfulness.local_judge import local_judge, require_local_judge_extra
from detectors.faithfulness.token_classifier import PINNED_REVISIONS as TOKEN_REVISIONS
from detectors.faithfulness.token_classifier import WEIGHT_FILES as TOKEN_WEIGHT_FILES
from detectors.faithfulness.token_classifier import resolve_token_model
from monitor.contract.components import BuildContext, DetectorComponent, ModelNeed, ModelSupport
from monitor.contract.detector import Detector
from monitor.contract.extras import missing_modules, require_extra
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.shared import SLICER
from monitor.contract.sidecar_registry import SidecarRegistry

if TYPE_CHECKING:
    from monitor.contract.rulekit.simulation import SimulatedWorld

# What the scorer reads: the checkpoint's config.json and weights; of the foundation only
# the T5 configuration and the tokenizer (its own ~1 GB of weights are never loaded).
CHECKPOINT_FILES = ("config.json",)
FOUNDATION_FILES = ("*.json", "spiece.model")
VERIFY_PAIR = ("The parcel left the warehouse on Monday.", "The parcel left on Monday.")
# What the token judge reads: config.json, the tokenizer's files (tokenizer.json,
# tokenizer_config.json, special_tokens_map.json) and one copy of the weights.
TOKEN_FILES = ("*.json",)
VERIFY_QUESTION = "When did the parcel leave?"


def require_extras(config: FaithfulnessConfig) -> None:
    """Stop before serving when what the section enables is not installed. The default
    (HHEM inline) needs the hhem extra, and so does a cascade whose first judge is HHEM;
    the core install judges with an LLM or leaves judging to the scorers."""
    if not config.enabled:
        return
    if config.judge_location == "inline":
        require_local_judge_extra(
            config,
            "set detectors.faithfulness.judge_location: kafka (the scorers judge), "
            "judge: openai_compatible or enabled: false",
        )
    if config.phoenix.enabled and config.phoenix.annotate:
        require_extra(
            "phoenix",
            "detectors.faithfulness.phoenix (annotate: true)",
            "set detectors.faithfulness.phoenix.enabled: false",
        )


def _build(config: FaithfulnessConfig, context: BuildContext) -> Detector:
    from detectors.faithfulness.detector import FaithfulnessDetector

    return FaithfulnessDetector(
        config,
        context.registry,
        emit=context.emit,
        kafka=context.kafka,
        slicer=context.shared[SLICER],
    )


def model_needs(config: FaithfulnessConfig) -> list[ModelNeed]:
    """The HHEM checkpoint and its foundation, unless the model is a local directory.

    Fetched to a directory, the foundation goes inside the checkpoint's, where
    ``read_checkpoint`` looks for the ``foundation`` its config.json names: one
    setting (``model``) then points at both. The token judge's checkpoint instead, when
    it is the local judge.
    """
    if config.enabled and local_judge(config) == "token_classifier":
        return token_model_needs(config)
    model = config.model
    if not config.enabled or local_judge(config) != "hhem" or Path(model).expanduser().is_dir():
        return []
    if Path(model).is_absolute() or model.startswith(".") or model.count("/") != 1:
        raise ValueError(
            f"detectors.faithfulness.model: {model!r} is neither a directory nor a hub id"
        )
    checkpoint = ModelNeed(
        repo=model,
        revision=PINNED_REVISIONS.get(model, "main"),
        files=CHECKPOINT_FILES,
        directory=model,
        weights=WEIGHT_FILES,
        setting="model",
    )
    foundation = ModelNeed(
        repo=DEFAULT_FOUNDATION,
        revision=PINNED_REVISIONS[DEFAULT_FOUNDATION],
        files=FOUNDATION_FILES,
        directory=f"{model}/{DEFAULT_FOUNDATION}",
    )
    return [checkpoint, foundation]


def token_model_needs(config: FaithfulnessConfig) -> list[ModelNeed]:
    """The token classifier's checkpoint (config, tokenizer, weights) at its pinned
    revision, unless it is a local directory; fetched to a directory, it goes under the
    hub id's path and ``token_classifier.model`` points there."""
    model = config.token_classifier.model
    if Path(model).expanduser().is_dir():
        return []
    if Path(model).is_absolute() or model.startswith(".") or model.count("/") != 1:
        raise ValueError(
            f"detectors.faithfulness.token_classifier.model: {model!r} is neither a "
            "directory nor a hub id"
        )
    return [
        ModelNeed(
            repo=model,
            revision=TOKEN_REVISIONS.get(model, "main"),
            files=TOKEN_FILES,
            directory=model,
            weights=TOKEN_WEIGHT_FILES,
            setting="token_classifier.model",
        )
    ]


def load_model(config: FaithfulnessConfig) -> None:
    """Load the checkpoint as the scoring worker does and score one pair; raise if it fails.

    On the CPU in fp32 whatever ``device`` says: the machine that fetches may
    have no GPU, and what is checked here is the files.
    """
    if local_judge(config) == "token_classifier":
        _load_token_model(config)
        return
    from detectors.faithfulness.hhem import HhemScorer

    scorer = HhemScorer(read_checkpoint(config.model), max_premise_tokens=config.max_premise_tokens)
    [score] = scorer.score([VERIFY_PAIR])
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"the model scored {score}, outside [0, 1]")


def _load_token_model(config: FaithfulnessConfig) -> None:
    from detectors.faithfulness.judge_contract import JudgePair
    from detectors.faithfulness.token_classifier import TokenClassifier
    from detectors.faithfulness.token_judge import TokenJudge

    section = config.token_classifier
    classifier = TokenClassifier(resolve_token_model(section.model), max_length=section.max_length)
    premise, answer = VERIFY_PAIR
    [result] = TokenJudge(classifier).score([JudgePair(premise, answer, VERIFY_QUESTION)])
    if result.score is None or not 0.0 <= result.score <= 1.0:
        raise ValueError(f"the model gave {result.outcome} {result.score}, not a score in [0, 1]")


def missing_models(config: FaithfulnessConfig) -> list[str]:
    """The model (or its foundation) that is neither a directory nor in the local cache.
    None without the judge's extra: resolving needs its hub client, and the sidecar's
    build names the extra to install."""
    if config.enabled and local_judge(config) == "token_classifier":
        if missing_modules("token-judge"):
            return []
        try:
            resolve_token_model(config.token_classifier.model)
        except ModelMissingError as exc:
            return [exc.name]
        return []
    if not config.enabled or local_judge(config) != "hhem" or missing_modules("hhem"):
        return []
    try:
        read_checkpoint(config.model)
    except ModelMissingError as exc:
        return [exc.name]
    except ValueError:
        return []  # a checkpoint of another kind: present, and the detector says why it fails
    return []


def _fields(config: FaithfulnessConfig, guardrails: GuardrailsConfig) -> tuple[str, ...]:
    """The judge reads the answer against the contexts' text."""
    return ("answer", "contexts") if config.enabled else ()


def _simulate(
    config: FaithfulnessConfig, guardrails: GuardrailsConfig, world: SimulatedWorld
) -> None:
    from detectors.faithfulness.simulate import series

    series(config, guardrails, world)


def _late_metrics(registry: SidecarRegistry) -> None:
    """The HHEM precision gauge (declared once the model is loaded), an LLM judge's
    counters (declared when one is configured) and a cascade's (when it loads)."""
    from detectors.faithfulness.cascade_judge import CascadeMetrics
    from detectors.faithfulness.hhem_judge import precision_info
    from detectors.faithfulness.judge_metrics import JudgeMetrics
    from detectors.faithfulness.prices import Prices

    precision_info(registry)
    JudgeMetrics(registry, "openai_compatible", Prices())
    CascadeMetrics(registry, "hhem", "openai_compatible")


COMPONENT = DetectorComponent(
    name="faithfulness",
    config_model=FaithfulnessConfig,
    description="sampled faithfulness (HHEM or an LLM judge)",
    build=_build,
    fields=_fields,
    rules=alerting.rules,
    rows=alerting.rows,
    order=40,
    models=ModelSupport(needs=model_needs, load=load_model, missing=missing_models),
    simulate=_simulate,
    incidents=("faithfulness", "faithfulness_intent", "judge_blind", "judge_change"),
    late_metrics=_late_metrics,
    require_extras=require_extras,
)

"""The drift detector's registration (entry point ``rag_monitor.detectors: drift``)."""

from __future__ import annotations

from pathlib import Path

from detectors.drift import alerting
from detectors.drift.config import DriftConfig
from monitor.contract.components import BuildContext, DetectorComponent, ModelNeed, ModelSupport
from monitor.contract.detector import Detector
from monitor.contract.extras import require_extra
from monitor.contract.guardrails import GuardrailsConfig

# An encoder's configuration and tokenizer (vocab.txt, spiece.model, tokenizer.json),
# and one copy of its weights; ONNX, OpenVINO and TF exports are left on the hub.
EMBEDDER_FILES = ("*.json", "*.txt", "*.model")
EMBEDDER_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
VERIFY_TEXTS = ["where is my parcel"]


def require_extras(config: DriftConfig) -> None:
    """The alibi backend and a configured embedder each need their extra."""
    if config.enabled and config.backend == "alibi":
        require_extra("alibi", "detectors.drift (backend: alibi)", "set backend: scipy")
    if config.enabled and config.embedder is not None:
        require_extra(
            "embedder",
            f"detectors.drift (embedder: {config.embedder})",
            "set embedder: null (traced query vectors)",
        )


def _build(config: DriftConfig, context: BuildContext) -> Detector:
    from detectors.drift.detector import DriftDetector

    return DriftDetector(
        config,
        context.service.state_dir,
        context.registry,
        state_max_bytes=context.service.state_max_bytes,
    )


def embedder_needs(config: DriftConfig) -> list[ModelNeed]:
    """The configured embedder when it is a hub id (not a directory or the packaged MiniLM).

    The embedder reads a hub id's ``main`` from the cache (it has no revision
    setting), so ``main`` is what is fetched.
    """
    if not config.enabled or config.embedder is None:
        return []
    from detectors.drift.embedder import resolve_model

    source = resolve_model(config.embedder)  # ImportError: the packaged model's extra
    if Path(source).is_dir():
        return []
    if Path(source).is_absolute() or source.startswith(".") or source.count("/") != 1:
        raise ValueError(
            f"detectors.drift.embedder: {config.embedder!r} is neither a directory nor a hub id"
        )
    return [
        ModelNeed(
            repo=source,
            revision="main",
            files=EMBEDDER_FILES,
            directory=source,
            weights=EMBEDDER_WEIGHTS,
            setting="embedder",
        )
    ]


def load_embedder(config: DriftConfig) -> None:
    """Load the embedder as the drift worker does and embed one text; raise if it fails."""
    from detectors.drift.embedder import QueryEmbedder

    if config.embedder is None:
        return
    embedder = QueryEmbedder(config.embedder)
    vectors = embedder.embed(VERIFY_TEXTS)
    if vectors.shape != (1, embedder.dimension):
        raise ValueError(f"the embedder returned shape {vectors.shape}")


def missing_embedder(config: DriftConfig) -> list[str]:
    """The configured hub-id embedder when its configuration is not in the local cache."""
    try:
        needs = embedder_needs(config)
    except (ImportError, ValueError):
        return [str(config.embedder)]
    if not needs:  # no embedder, or a local one: nothing to look up in the hub's cache
        return []
    from huggingface_hub import try_to_load_from_cache

    return [
        need.repo
        for need in needs
        if not isinstance(try_to_load_from_cache(need.repo, "config.json"), str)
    ]


def _fields(config: DriftConfig, guardrails: GuardrailsConfig) -> tuple[str, ...]:
    """Traced query vectors, or the query text an embedder turns into one."""
    if not config.enabled:
        return ()
    return ("query_vector",) if config.embedder is None else ("query",)


COMPONENT = DetectorComponent(
    name="drift",
    config_model=DriftConfig,
    description="query-embedding drift",
    build=_build,
    fields=_fields,
    rules=alerting.rules,
    rows=alerting.rows,
    order=60,
    models=ModelSupport(needs=embedder_needs, load=load_embedder, missing=missing_embedder),
    require_extras=require_extras,
)

"""Optional dependencies: which extra of ``rag-monitor`` brings which modules, and the
error a detector or backend raises at start-up when its extra is not installed.

The core install runs the collectors, the inline detectors, drift on the scipy backend
and faithfulness judged elsewhere (an LLM, or the scorers); the model runtimes and
their friends come with extras (pyproject.toml). A component checks here before it
builds, so a missing extra stops the sidecar before it serves, with the command to run,
instead of failing on the worker thread at the first sampled trace.
"""

from __future__ import annotations

from importlib.util import find_spec

# The top-level modules each extra brings that the code imports (checked with find_spec:
# nothing is imported here, so the check costs no start-up time).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "hhem": ("torch", "transformers", "onnxruntime", "onnx"),
    "token-judge": ("torch", "transformers"),
    "alibi": ("alibi_detect", "torch"),
    "phoenix": ("phoenix",),
    "report": ("matplotlib",),
    "embedder": ("torch", "transformers"),
}


class MissingExtraError(ValueError):
    """An enabled detector or backend whose extra is not installed (a ValueError: the
    sidecar reports it as a configuration that cannot run here)."""


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that this environment cannot import."""
    return [module for module in EXTRA_MODULES[extra] if find_spec(module) is None]


def require_extra(extra: str, needed_by: str, instead: str = "") -> None:
    """Raise MissingExtraError when ``extra`` is not installed: ``needed_by`` names the
    setting that needs it, ``instead`` the setting that would do without it."""
    missing = missing_modules(extra)
    if not missing:
        return
    message = f"{needed_by} needs the {extra} extra: pip install 'rag-monitor[{extra}]'"
    if instead:
        message += f", or {instead}"
    raise MissingExtraError(f"{message} (not importable: {', '.join(missing)})")

"""``open_judge``: the faithfulness judge that ``judge:`` names, loaded.

What a judge is (``Judge``, ``JudgePair``, ``JudgeResult``, ``ErrorKind``) is in
``judge_contract.py``; each judge (``hhem_judge.py``, ``llm_judge.py``) imports that, and only this
module imports the judges: the worker and the scorer open one here. A cascade
(``cascade_judge.py``) is handed ``open_judge`` to open its first judge, as if that were
configured alone.
"""

from __future__ import annotations

from collections.abc import Callable
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

        # The cascade opens its first judge here, as if it were configured alone.
        return load_cascade_judge(
            config,
            registry=registry,
            on_stats=on_stats,
            stopping=stopping,
            open_first=open_judge,
        )
    if config.judge == "token_classifier":
        from detectors.faithfulness.token_judge import load_token_judge

        return load_token_judge(config, registry=registry, on_stats=on_stats, stopping=stopping)
    from detectors.faithfulness.hhem_judge import load_hhem_judge

    return load_hhem_judge(config, registry=registry, on_stats=on_stats, stopping=stopping)

"""The two faithfulness judges, and ``open_judge``, which loads the one ``judge:`` names.

What a judge is (``Judge``, ``JudgePair``, ``JudgeResult``, ``ErrorKind``) is in
``judge.py``; each judge (``hhem_judge.py``, ``llm_judge.py``) imports that, and only this
module imports the judges: the worker and the scorer open one here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import threading

    from prometheus_client import CollectorRegistry

    from detectors.faithfulness.config import FaithfulnessConfig
    from detectors.faithfulness.judge import Judge, WorkerStats


def open_judge(
    config: FaithfulnessConfig,
    *,
    registry: CollectorRegistry | None,
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
    from detectors.faithfulness.hhem_judge import load_hhem_judge

    return load_hhem_judge(config, registry=registry, on_stats=on_stats, stopping=stopping)

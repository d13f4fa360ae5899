"""``precision: auto``: measure each faster precision against fp32 at start-up, keep the
fastest that agrees with fp32.

The worker loads the model in fp32, scores the built-in calibration set
(``calibration_pairs.txt``) with it, then converts it to each candidate in turn
(bf16 autocast, full bf16; on a CPU also dynamic int8, ONNX Runtime in fp32, and ONNX
Runtime with dynamic int8 weights) and scores the same set; a candidate that fails to
convert or run is logged and left out. A candidate qualifies when no score moves more
than ``precision_tolerance`` from fp32's and no verdict at ``threshold`` flips; the
fastest qualifying one is used, fp32 (which always qualifies) when none is faster.
Speed is pairs per second on the set, after one warm-up pass that pays the one-time
allocations, so the choice reflects this machine, its cores and its load at start-up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from detectors.faithfulness.hhem import HhemScorer, Precision, PreparedPair

log = structlog.get_logger("rag_monitor.faithfulness")

CALIBRATION_FILE = Path(__file__).with_name("calibration_pairs.txt")
CPU_CANDIDATES: tuple[Precision, ...] = ("bf16_autocast", "bf16", "int8", "onnx", "onnx_int8")
# int8 and the ONNX precisions: cpu only
CUDA_CANDIDATES: tuple[Precision, ...] = ("bf16_autocast", "bf16")


class CalibrationCancelled(Exception):
    """The worker was told to stop while it calibrated."""


@dataclass(frozen=True, slots=True)
class Measurement:
    """One precision on the calibration set, against fp32."""

    precision: Precision
    pairs_per_second: float
    max_change: float  # the largest |score - fp32 score|
    flips: int  # pairs whose verdict at the threshold differs from fp32's


@dataclass(frozen=True, slots=True)
class PrecisionChoice:
    """The precision ``auto`` chose and what it measured."""

    precision: Precision
    measurements: tuple[Measurement, ...]

    def log_fields(self) -> dict[str, Any]:
        """The choice and each candidate's figures, for one log line."""
        return {
            "precision": self.precision,
            "candidates": {
                m.precision: {
                    "pairs_per_s": round(m.pairs_per_second, 3),
                    "max_change": round(m.max_change, 5),
                    "flips": m.flips,
                }
                for m in self.measurements
            },
        }


def read_calibration_pairs(path: Path = CALIBRATION_FILE) -> list[tuple[str, str]]:
    """(premise, hypothesis) pairs of a calibration file (its header says the format)."""
    pairs: list[tuple[str, str]] = []
    paragraphs: list[str] = []
    after_hypothesis = False
    for number, raw in enumerate(path.read_text("utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        kind, _, text = line.partition(":")
        if kind == "premise":
            if after_hypothesis:
                paragraphs, after_hypothesis = [], False
            paragraphs.append(text.strip())
        elif kind == "hypothesis" and paragraphs:
            pairs.append(("\n\n".join(paragraphs), text.strip()))
            after_hypothesis = True
        else:
            raise ValueError(f"{path}:{number}: expected 'premise:' or 'hypothesis:'")
    return pairs


def candidates_for(device_type: str) -> tuple[Precision, ...]:
    """The precisions tried besides fp32 on this kind of device."""
    return CUDA_CANDIDATES if device_type == "cuda" else CPU_CANDIDATES


def choose(measurements: Sequence[Measurement], tolerance: float) -> Precision:
    """The fastest precision within ``tolerance`` of fp32 that flips no verdict; fp32's
    own measurement (no change) always qualifies."""
    qualifying = [m for m in measurements if m.max_change <= tolerance and m.flips == 0]
    return max(qualifying, key=lambda m: m.pairs_per_second).precision


def calibrate(
    fp32: HhemScorer,
    *,
    threshold: float,
    tolerance: float,
    batch_size: int,
    cancelled: Callable[[], bool] = lambda: False,
) -> tuple[HhemScorer, PrecisionChoice]:
    """Measure fp32 and each candidate on the calibration set; return the chosen scorer.

    Candidates are converted one at a time and dropped after their pass, so the
    memory of at most two copies of the model is in use; the winner is converted
    again at the end. Raises ``CalibrationCancelled`` when ``cancelled`` turns true.
    """
    prepared = [fp32.prepare(p, h) for p, h in read_calibration_pairs()]

    def check() -> None:
        if cancelled():
            raise CalibrationCancelled

    reference_speed, reference = _measure(fp32, prepared, batch_size, check)
    measurements = [Measurement("fp32", reference_speed, 0.0, 0)]
    for precision in candidates_for(fp32.device.type):
        check()
        try:
            speed, scores = _measure(fp32.converted(precision), prepared, batch_size, check)
        except CalibrationCancelled:
            raise
        except Exception as exc:  # an exporter or kernel this machine lacks: not a candidate
            log.warning("faithfulness_precision_unavailable", precision=precision, error=repr(exc))
            continue
        pairs = list(zip(scores, reference, strict=True))
        changes = [abs(a - b) for a, b in pairs]
        flips = sum((a >= threshold) != (b >= threshold) for a, b in pairs)
        measurements.append(Measurement(precision, speed, max(changes, default=0.0), flips))
    chosen = choose(measurements, tolerance)
    scorer = fp32 if chosen == "fp32" else fp32.converted(chosen)
    return scorer, PrecisionChoice(chosen, tuple(measurements))


def _measure(
    scorer: HhemScorer, prepared: list[PreparedPair], batch_size: int, check: Callable[[], None]
) -> tuple[float, list[float]]:
    """Pairs per second and the scores, after a warm-up pass on the shortest pair."""
    check()
    scorer.score_prepared([min(prepared, key=lambda p: len(p.input_ids))])
    started = time.perf_counter()
    scores = scorer.score_batched(prepared, batch_size, before_batch=check)
    return len(prepared) / max(time.perf_counter() - started, 1e-9), scores

"""alibi-detect's MMD detectors (pytorch backend), imported only when this backend is used.

alibi-detect 0.12+ is under the Business Source License 1.1: production use
needs a licence from Seldon. ``backend: scipy`` computes the same test without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from detectors.drift.result import DriftResult, Vectors

_MISSING = (
    "detectors.drift.backend: alibi needs alibi-detect with torch "
    "(pip install 'alibi-detect[torch]>=0.12'; note its BSL 1.1 licence), "
    "or set detectors.drift.backend: scipy"
)


def _alibi_cd() -> Any:
    try:
        from alibi_detect import cd
    except ImportError as exc:
        raise ImportError(_MISSING) from exc
    return cd


class AlibiMmd:
    """``MMDDrift`` with the pytorch backend; the kernel bandwidth comes from the reference."""

    def __init__(self, reference: Vectors, p_value: float, n_permutations: int) -> None:
        reference = np.ascontiguousarray(reference, dtype=np.float64)
        self._n = len(reference)
        self._detector = _alibi_cd().MMDDrift(
            reference,
            backend="pytorch",
            p_val=p_value,
            n_permutations=n_permutations,
            device="cpu",
        )
        self.sigma = float(self._detector._detector.kernel.sigma.detach().cpu().numpy()[0])

    def test(self, window: Vectors) -> DriftResult:
        """One ``MMDDrift.predict`` of ``window``."""
        window = np.ascontiguousarray(window, dtype=np.float64)
        data = self._detector.predict(window, return_p_val=True, return_distance=True)["data"]
        return DriftResult(
            is_drift=bool(data["is_drift"]),
            statistic=float(data["distance"]),
            p_value=float(data["p_val"]),
            threshold=float(data["distance_threshold"]),
            sigma=self.sigma,
            n_reference=self._n,
            n_window=len(window),
            backend="alibi",
        )


class AlibiMmdOnline:
    """``MMDDriftOnline``: a test on every vector, thresholds calibrated for an expected run time.

    Calibration (at construction) costs about ``n_bootstraps * window_size``
    small kernel sums, so keep the online window small (tens to a few hundred).
    """

    def __init__(self, reference: Vectors, ert: float, window_size: int, n_bootstraps: int) -> None:
        reference = np.ascontiguousarray(reference, dtype=np.float64)
        self._n = len(reference)
        self._window_size = window_size
        self._detector = _alibi_cd().MMDDriftOnline(
            reference,
            ert=ert,
            window_size=window_size,
            backend="pytorch",
            n_bootstraps=n_bootstraps,
            device="cpu",
            verbose=False,
        )
        self.sigma = float(self._detector._detector.kernel.sigma.detach().cpu().numpy()[0])

    def update(self, vector: Vectors) -> DriftResult:
        """Feed one vector; the result tests the current sliding window."""
        data = self._detector.predict(np.asarray(vector, dtype=np.float64), return_test_stat=True)
        data = data["data"]
        return DriftResult(
            is_drift=bool(data["is_drift"]),
            statistic=float(data["test_stat"]),
            p_value=None,
            threshold=float(data["threshold"]),
            sigma=self.sigma,
            n_reference=self._n,
            n_window=self._window_size,
            backend="alibi-online",
        )

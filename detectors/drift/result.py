"""The one result type every drift backend returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

BackendName = Literal["alibi", "scipy", "alibi-online"]
Vectors = npt.NDArray[np.floating[Any]]


@dataclass(frozen=True, slots=True)
class DriftResult:
    """One test of a window against the reference.

    ``statistic`` is the unbiased MMD^2 estimate (online: alibi's test statistic);
    ``threshold`` is the statistic above which the window counts as drifted
    (batch: the permutation quantile at ``p_value``; online: the ERT threshold);
    ``p_value`` is None in online mode, which has none.
    """

    is_drift: bool
    statistic: float
    p_value: float | None
    threshold: float | None
    sigma: float | None
    n_reference: int
    n_window: int
    backend: BackendName


class WindowTest(Protocol):
    """A batch backend: built once per reference, then one call per window."""

    def test(self, window: Vectors) -> DriftResult:
        """Test ``window`` (rows are vectors) against the reference."""
        ...


class OnlineTest(Protocol):
    """An online backend: one call per vector."""

    def update(self, vector: Vectors) -> DriftResult:
        """Add one vector to the sliding test window and test it."""
        ...

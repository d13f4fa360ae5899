"""MMD^2 two-sample test with numpy/scipy: no alibi-detect, no torch.

The statistic, the kernel and its bandwidth are alibi-detect's (so the two
backends agree): a Gaussian RBF kernel ``exp(-d^2 / (2 sigma^2))`` whose
``sigma`` comes from the median heuristic on the reference alone, and the
unbiased MMD^2 (zero kernel diagonal, ``1/(n(n-1))`` and ``1/(m(m-1))``
within-sample weights).

The speed comes from doing each piece of work once. The reference block of the
kernel matrix is computed when the reference is set; a test adds the
reference-window and window-window blocks. Every permutation's statistic is a
quadratic form in the group indicator ``a`` (1 for the "reference" side):
``a'Ka``, ``1'Ka`` and ``1'K1`` give the three sums of the estimator, so all
permutations and the observed split come from one product ``K @ A``.
The p-value counts the observed statistic among the permutations:
``(1 + #{perm >= observed}) / (1 + n_permutations)``, which is never 0.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy.linalg.blas import dgemm

from detectors.drift.result import DriftResult, Vectors

Matrix = npt.NDArray[np.float64]


def squared_distances(x: Matrix, y: Matrix) -> Matrix:
    """Pairwise squared Euclidean distances, ``|x|^2 + |y|^2 - 2 x.y``, clipped at 0."""
    cross: Matrix = dgemm(alpha=-2.0, a=x, b=y, trans_b=True)
    cross += np.einsum("ij,ij->i", x, x)[:, None]
    cross += np.einsum("ij,ij->i", y, y)[None, :]
    return np.maximum(cross, 0.0, out=cross)


def median_bandwidth(reference_distances: Matrix) -> float:
    """Median-heuristic ``sigma`` from the reference's own squared distances.

    The same choice as alibi-detect's ``sigma_median`` for ``x`` against itself:
    of all n*n entries, sorted, skip the n zeros of the diagonal and take the
    lower median of the rest; ``sigma = sqrt(d2 / 2)``.
    """
    n = reference_distances.shape[0]
    index = n + (n * n - n) // 2 - 1
    d2 = float(np.partition(reference_distances.ravel(), index)[index])
    if d2 <= 0.0:
        raise ValueError("the reference vectors are (almost) all identical; no bandwidth")
    return float(np.sqrt(0.5 * d2))


def mmd2_of_splits(kernel: Matrix, members: Matrix) -> Matrix:
    """Unbiased MMD^2 for each split; ``members`` is (splits, N), 1 for the first sample.

    ``kernel`` must have a zero diagonal.
    """
    n = float(members[0].sum())
    m = kernel.shape[0] - n
    weighted = kernel @ members.T  # (N, splits): the one large product
    within_first = np.einsum("sj,js->s", members, weighted)
    row_sums = kernel.sum(axis=1)
    first_to_all = members @ row_sums
    within_second = row_sums.sum() - 2.0 * first_to_all + within_first
    across = first_to_all - within_first
    result: Matrix = (
        within_first / (n * (n - 1.0)) + within_second / (m * (m - 1.0)) - 2.0 * across / (n * m)
    )
    return result


class ScipyMmd:
    """Permutation MMD test of windows against a fixed reference."""

    def __init__(
        self,
        reference: Vectors,
        p_value: float,
        n_permutations: int,
        seed: int | np.random.SeedSequence | None = None,
    ) -> None:
        self._reference = np.ascontiguousarray(reference, dtype=np.float64)
        if self._reference.ndim != 2 or len(self._reference) < 2:
            raise ValueError("the reference needs at least two vectors of one dimension")
        self.p_value = p_value
        self.n_permutations = n_permutations
        self._rng = np.random.default_rng(seed)
        distances = squared_distances(self._reference, self._reference)
        self.sigma = median_bandwidth(distances)
        self._gamma = 1.0 / (2.0 * self.sigma**2)
        self._k_rr = self._kernel(distances)
        np.fill_diagonal(self._k_rr, 0.0)

    def _kernel(self, distances: Matrix) -> Matrix:
        distances *= -self._gamma
        return np.exp(distances, out=distances)

    def kernel_matrix(self, window: Vectors) -> Matrix:
        """The full (reference + window) kernel matrix with a zero diagonal."""
        x = self._reference
        y = np.ascontiguousarray(window, dtype=np.float64)
        if y.ndim != 2 or y.shape[1] != x.shape[1] or len(y) < 2:
            raise ValueError(f"the window must be at least two vectors of dimension {x.shape[1]}")
        n, m = len(x), len(y)
        kernel = np.empty((n + m, n + m))
        kernel[:n, :n] = self._k_rr
        k_ry = self._kernel(squared_distances(x, y))
        kernel[:n, n:] = k_ry
        kernel[n:, :n] = k_ry.T
        kernel[n:, n:] = self._kernel(squared_distances(y, y))
        np.fill_diagonal(kernel, 0.0)
        return kernel

    def test(self, window: Vectors) -> DriftResult:
        """One permutation test of ``window`` against the reference."""
        kernel = self.kernel_matrix(window)
        n, m = len(self._reference), kernel.shape[0] - len(self._reference)
        observed = np.zeros(n + m)
        observed[:n] = 1.0
        splits = np.empty((self.n_permutations + 1, n + m))
        splits[0] = observed
        splits[1:] = self._rng.permuted(np.tile(observed, (self.n_permutations, 1)), axis=1)
        statistics = mmd2_of_splits(kernel, splits)
        statistic, permuted = float(statistics[0]), statistics[1:]
        p_value = (1.0 + np.count_nonzero(permuted >= statistic)) / (1.0 + self.n_permutations)
        # The statistic above which a window would be flagged at this level.
        threshold = float(np.sort(permuted)[::-1][int(self.p_value * self.n_permutations)])
        return DriftResult(
            is_drift=bool(p_value < self.p_value),
            statistic=statistic,
            p_value=float(p_value),
            threshold=threshold,
            sigma=self.sigma,
            n_reference=n,
            n_window=m,
            backend="scipy",
        )

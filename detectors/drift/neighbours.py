"""Neighbourhoods in one representation: k-means topics, and how stable a pinned probe
set's nearest neighbours are between two sets of vectors (two references, or the samples
before and after a representation change of the application)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from detectors.drift.result import Vectors
from detectors.drift.store import Reference

MAX_CLUSTERS = 8
NEIGHBOURS = 10


@dataclass
class NeighbourStability:
    """Probe neighbourhoods under an old and a new reference (or sample)."""

    old_id: int
    new_id: int
    when: float
    comparable: bool
    mean_overlap: float = 0.0
    stable_share: float = 0.0
    probes: int = 0


def clusters_for(n: int) -> int:
    return int(min(MAX_CLUSTERS, max(2, round(np.sqrt(n / 20)))))


def kmeans(vectors: Vectors, k: int, seed: int = 0) -> Vectors:
    from scipy.cluster.vq import kmeans2

    centroids, _ = kmeans2(vectors.astype(np.float64), k, minit="++", seed=seed)
    return np.asarray(centroids)


def assign(vectors: Vectors, centroids: Vectors) -> npt.NDArray[np.intp]:
    from scipy.spatial.distance import cdist

    return np.asarray(cdist(vectors, centroids, "sqeuclidean").argmin(axis=1))


def neighbour_stability(old: Reference, new: Reference, probes: Vectors) -> NeighbourStability:
    """How much of each probe's neighbourhood keeps its topic when the reference changes.

    Neighbours of two references are different records, so they are compared by
    topic: k-means clusters fitted on the old reference label the neighbours of
    each probe in both; a probe's stability is the overlap of the two label
    histograms of its ``NEIGHBOURS`` nearest neighbours (1: same topics).
    Vectors of another dimension (another embedding model) are not comparable.
    """
    result = NeighbourStability(old.id, new.id, new.created, comparable=False)
    dim = old.vectors.shape[1]
    if new.vectors.shape[1] != dim or len(probes) == 0 or probes.shape[1] != dim:
        return result
    from scipy.spatial.distance import cdist

    centroids = kmeans(old.vectors, clusters_for(len(old.vectors)))
    k = clusters_for(len(old.vectors))
    overlaps = []
    for ref in (old, new):
        labels = assign(ref.vectors, centroids)
        nearest = np.argsort(cdist(probes, ref.vectors, "sqeuclidean"), axis=1)[:, :NEIGHBOURS]
        overlaps.append(np.stack([np.bincount(labels[row], minlength=k) for row in nearest]))
    per_probe = np.minimum(overlaps[0], overlaps[1]).sum(axis=1) / min(
        NEIGHBOURS, len(old.vectors), len(new.vectors)
    )
    result.comparable = True
    result.mean_overlap = float(per_probe.mean())
    result.stable_share = float(np.mean(per_probe >= 0.5))
    result.probes = len(probes)
    return result

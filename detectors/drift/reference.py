"""``rag-monitor drift set-reference`` and ``drift references``: the versioned references.

Sources: the latest tested window (``--from-window latest``), the vectors
sampled from tests in a period (``--since 2d``), a stored reference
(``--snapshot ID``, e.g. to roll back), or a file: ``.npy`` (a 2-d array) or JSON
lines, each a list of numbers or an object with ``embedding`` (or ``vector``) and
optionally ``query``. The new reference is the active one of its representation
(``--representation``; else the embedder's, the window's, the latest test's, or
``unknown``). A running sidecar picks it up before its next test of that
representation.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from detectors.drift.config import DriftConfig
from detectors.drift.database import UNTAGGED
from detectors.drift.detector import pinned_representation
from detectors.drift.result import Vectors
from detectors.drift.store import DriftStore, ReferenceInfo
from monitor.contract.durations import parse_duration


def read_vectors(path: Path) -> tuple[Vectors, list[str | None]]:
    """Vectors (and query texts, when the file has them) from ``.npy`` or JSON lines."""
    if path.suffix == ".npy":
        array = np.load(path, allow_pickle=False)
        return np.asarray(array, dtype=np.float32), [None] * len(array)
    vectors: list[list[float]] = []
    texts: list[str | None] = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            if isinstance(record, dict):
                vector = record.get("embedding", record.get("vector"))
                text = record.get("query")
            else:
                vector, text = record, None
            if not isinstance(vector, list):
                raise ValueError(f"{path}:{number}: expected a list of numbers or 'embedding'")
            vectors.append([float(v) for v in vector])
            texts.append(text if isinstance(text, str) else None)
    if len({len(v) for v in vectors}) > 1:
        raise ValueError(f"{path}: vectors of different dimensions")
    return np.asarray(vectors, dtype=np.float32), texts


def set_reference(
    config: DriftConfig,
    state_dir: Path,
    *,
    from_window: str | None = None,
    since: str | None = None,
    file: Path | None = None,
    snapshot: int | None = None,
    representation: str | None = None,
) -> tuple[int, int]:
    """Make the chosen vectors the active reference of their representation; returns
    (reference id, vectors)."""
    store = DriftStore(state_dir, create=file is not None)
    try:
        if snapshot is not None:
            restored = store.reference(snapshot)
            if restored is not None and representation not in (None, restored.representation):
                raise ValueError(
                    f"reference {snapshot} is of representation {restored.representation!r}"
                )
            return snapshot, len(store.activate(snapshot).vectors)
        vectors, texts, source, chosen = _vectors_from(config, store, from_window, since, file)
        chosen = representation or chosen
        kept = texts if config.keep_examples and texts and any(texts) else None
        return store.set_reference(vectors, source, chosen, kept), len(vectors)
    finally:
        store.close()


def _vectors_from(
    config: DriftConfig,
    store: DriftStore,
    from_window: str | None,
    since: str | None,
    file: Path | None,
) -> tuple[Vectors, list[str | None] | None, str, str]:
    """Vectors, texts, source and representation of the chosen source."""
    pinned = pinned_representation(config)
    if file is not None:
        vectors, texts = read_vectors(file)
        return vectors, texts, f"file:{file.name}", pinned or UNTAGGED
    if from_window is not None:
        if from_window != "latest":
            raise ValueError("--from-window: only 'latest' (the last tested window) is kept")
        latest = store.latest_window()
        if latest is None:
            raise ValueError("no tested window in the state yet")
        return latest[0], None, "window:latest", latest[1]
    if since is not None:
        now = time.time()
        tests = store.tests(now - parse_duration(since), now)
        chosen = pinned or (tests[-1].representation if tests else None)
        vectors, texts = store.samples(now - parse_duration(since), now, chosen)
        if len(vectors) > config.reference_size:
            keep = np.sort(
                np.random.default_rng().choice(len(vectors), config.reference_size, False)
            )
            vectors, texts = vectors[keep], [texts[i] for i in keep]
        return vectors, texts, f"samples:{since}", chosen or UNTAGGED
    raise ValueError("give --file, --from-window latest, --since or --snapshot")


def list_references(state_dir: Path) -> list[ReferenceInfo]:
    """Every stored reference, oldest first (``rag-monitor drift references``)."""
    store = DriftStore(state_dir, create=False)
    try:
        return store.references()
    finally:
        store.close()

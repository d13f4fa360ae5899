"""``rag-monitor drift set-reference``: replace the drift reference from the state or a file.

Sources: the latest tested window (``--from-window latest``), the vectors
sampled from tests in a period (``--since 2d``), or a file: ``.npy`` (a 2-d
array) or JSON lines, each a list of numbers or an object with ``embedding``
(or ``vector``) and optionally ``query``. A running sidecar picks the new
reference up before its next test.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from detectors.drift.config import DriftConfig
from detectors.drift.detector import representation_of
from detectors.drift.result import Vectors
from detectors.drift.store import DriftStore
from monitor.durations import parse_duration


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
) -> tuple[int, int]:
    """Store the chosen vectors as the active reference; returns (reference id, vectors)."""
    store = DriftStore(state_dir, create=file is not None)
    try:
        texts: list[str | None] | None = None
        if file is not None:
            vectors, texts = read_vectors(file)
            source = f"file:{file.name}"
        elif from_window is not None:
            if from_window != "latest":
                raise ValueError("--from-window: only 'latest' (the last tested window) is kept")
            latest = store.latest_window()
            if latest is None:
                raise ValueError("no tested window in the state yet")
            vectors, source = latest, "window:latest"
        elif since is not None:
            now = time.time()
            vectors, texts = store.samples(now - parse_duration(since), now)
            if len(vectors) > config.reference_size:
                keep = np.sort(
                    np.random.default_rng().choice(len(vectors), config.reference_size, False)
                )
                vectors, texts = vectors[keep], [texts[i] for i in keep]
            source = f"samples:{since}"
        else:
            raise ValueError("give --file, --from-window latest or --since")
        kept = texts if config.keep_examples and texts and any(texts) else None
        reference_id = store.set_reference(vectors, source, representation_of(config), kept)
        return reference_id, len(vectors)
    finally:
        store.close()

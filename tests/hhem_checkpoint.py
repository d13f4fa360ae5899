"""HHEM-2.1-Open checkpoints in the published layout, with random weights, for tests and
benchmarks (no download).

The layout: ``config.json`` (model_type HHEMv2, a ``foundation`` and a
``prompt``), ``model.safetensors`` holding a T5ForTokenClassification under the
prefix ``t5.`` with the shared embedding stored once; the foundation directory
holds the T5 configuration and the tokenizer (ByT5 here: it needs no vocabulary
file).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from transformers import ByT5Tokenizer, T5Config, T5ForTokenClassification

from detectors.faithfulness.hhem import DEFAULT_PROMPT

Tiny = tuple[Path, T5ForTokenClassification]
TINY = {"d_model": 32, "d_kv": 8, "d_ff": 64, "num_layers": 2, "num_heads": 4}
# google/flan-t5-base's encoder: the model HHEM-2.1-Open fine-tunes.
FLAN_T5_BASE = {
    "d_model": 768,
    "d_kv": 64,
    "d_ff": 2048,
    "num_layers": 12,
    "num_heads": 12,
    "vocab_size": 32128,
}


def build_checkpoint(
    directory: Path,
    *,
    size: dict[str, int] | None = None,
    seed: int = 0,
    spread: float = 2.0,
    model_type: str = "HHEMv2",
) -> tuple[Path, T5ForTokenClassification]:
    """Write an HHEM checkpoint and its foundation under ``directory``.

    Returns the checkpoint directory and the model that was saved (in eval
    mode), for computing reference scores independently of the loader.
    A random T5's first-position states share one large component, which
    would pin every score near 0 or 1; the classifier is set to read the
    deviation from that component, scaled so logits have sd ``spread``.
    """
    torch.manual_seed(seed)
    foundation = directory / "flan-t5-foundation"
    checkpoint = directory / "hhem"
    checkpoint.mkdir(parents=True, exist_ok=True)
    t5_config = T5Config(  # type: ignore[no-untyped-call]
        **{"vocab_size": 384, **(size or TINY)},
        num_labels=2,
        feed_forward_proj="gated-gelu",
        dropout_rate=0.0,
        classifier_dropout=0.0,
        tie_word_embeddings=False,
    )
    t5_config.save_pretrained(foundation)
    ByT5Tokenizer().save_pretrained(foundation)
    model = T5ForTokenClassification(t5_config)
    model.eval()  # type: ignore[no-untyped-call]
    _spread_classifier(model, spread)
    state = {
        f"t5.{key}": value.contiguous()
        for key, value in model.state_dict().items()
        if key != "transformer.encoder.embed_tokens.weight"  # stored once, as shared
    }
    save_file(state, str(checkpoint / "model.safetensors"))
    config: dict[str, Any] = {
        "architectures": ["HHEMv2ForSequenceClassification"],
        "auto_map": {
            "AutoConfig": "configuration_hhem_v2.HHEMv2Config",
            "AutoModelForSequenceClassification": "modeling_hhem_v2.HHEMv2ForSequenceClassification",
        },
        "foundation": str(foundation),
        "model_type": model_type,
        "prompt": DEFAULT_PROMPT,
        "torch_dtype": "float32",
    }
    (checkpoint / "config.json").write_text(json.dumps(config, indent=2))
    return checkpoint, model


def reference_scores(
    model: T5ForTokenClassification, pairs: Sequence[tuple[str, str]], prompt: str = DEFAULT_PROMPT
) -> list[float]:
    """HHEM's predict(), written out: prompt, right-padded batch, position 0, softmax, class 1."""
    tokenizer = ByT5Tokenizer()
    texts = [prompt.format(text1=premise, text2=hypothesis) for premise, hypothesis in pairs]
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        logits = model(**inputs).logits
    return [float(p) for p in torch.softmax(logits[:, 0, :], dim=-1)[:, 1]]


_CALIBRATION = [
    ("The capital of France is Berlin.", "The capital of France is Paris."),
    ("I am in California", "I am in United States."),
    ("A man walks his dog in the park.", "Nobody is outside."),
    ("Refunds are possible within 30 days.", "You can get a refund."),
    ("Shipping is free above 50 euros.", "Shipping costs 5 dollars."),
    ("text of d1\n\ntext of d2", "Refunds are possible within 30 days."),
]


def _spread_classifier(model: T5ForTokenClassification, spread: float) -> None:
    tokenizer = ByT5Tokenizer()
    texts = [DEFAULT_PROMPT.format(text1=p, text2=h) for p, h in _CALIBRATION]
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        states = model.transformer(**inputs).last_hidden_state[:, 0, :]
        direction = torch.randn(states.shape[1])
        logits = states @ direction
        direction *= spread / float(logits.std())
        model.classifier.weight.zero_()
        model.classifier.weight[1] = direction
        model.classifier.bias.zero_()
        model.classifier.bias[1] = -float((states @ direction).mean())

"""HHEM-2.1-Open checkpoints in the published layout, with random weights, for tests and
benchmarks (no download); or with weights set so that the score reads marker characters
(``build_marked_checkpoint``): a judge that can tell the texts a test means apart.

The layout: ``config.json`` (model_type HHEMv2, a ``foundation`` and a
``prompt``), ``model.safetensors`` holding a T5ForTokenClassification under the
prefix ``t5.`` with the shared embedding stored once; the foundation directory
holds the T5 configuration and the tokenizer (ByT5 here: it needs no vocabulary
file).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Sequence
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
    weights: Callable[[T5ForTokenClassification], None] | None = None,
) -> tuple[Path, T5ForTokenClassification]:
    """Write an HHEM checkpoint and its foundation under ``directory``.

    Returns the checkpoint directory and the model that was saved (in eval
    mode), for computing reference scores independently of the loader.
    A random T5's first-position states share one large component, which
    would pin every score near 0 or 1; the classifier is set to read the
    deviation from that component, scaled so logits have sd ``spread``.
    ``weights``, where given, sets the random model's weights instead.
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
    if weights is None:
        _spread_classifier(model, spread)
    else:
        weights(model)
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


# The marked judge: position 0 attends to marker bytes e^MARKER_PULL times as much as to
# any other byte, and the classifier reads the share of its attention that went to them.
MARKER_PULL = 8.0
_CARRY = 4.0  # the attention's output in the residual stream, against the embedding's 1
_READ = 0.7  # the classifier's weight: logit = _READ * (y[2] - y[3]) of the final state


def build_marked_checkpoint(directory: Path, marker: str) -> Tiny:
    """``build_checkpoint`` with weights set, not trained, so that the score depends on the
    text in a known way (``marked_score``): about 0.98 for a text without any byte of
    ``marker``, below 0.05 for one with a marker byte among up to a thousand others."""
    ids = ByT5Tokenizer()(marker, add_special_tokens=False)["input_ids"]
    return build_checkpoint(directory, weights=functools.partial(_set_marked, marker_ids=ids))


def marked_score(markers: int, tokens: int) -> float:
    """The marked judge's score of an input of ``tokens`` tokens (prompt, premise,
    hypothesis and end of sequence), ``markers`` of them marker bytes: the share of
    position 0's attention on them is w = m e^PULL / (m e^PULL + tokens - m); the final
    state holds the embedding's 1 and _CARRY * sqrt(d_model) * (1 - w, w), normalized;
    P(consistent) = sigmoid(_READ * (its third - its fourth component))."""
    d_model = TINY["d_model"]
    pulled = markers * math.exp(MARKER_PULL)
    w = pulled / (pulled + tokens - markers)
    carried = _CARRY * math.sqrt(d_model)
    rms = math.sqrt((1 + carried**2 * ((1 - w) ** 2 + w**2)) / d_model)
    logit = _READ * carried * (1 - 2 * w) / rms
    return 1 / (1 + math.exp(-logit))


def _set_marked(model: T5ForTokenClassification, marker_ids: Sequence[int]) -> None:
    """Every weight 0 but the RMS norms' (1) and these: each byte's embedding is e0, a
    marker's e1 (after the first norm: sqrt(d_model) times that); in the first layer,
    head 0's query reads e0 and its key e1, so that position 0 (the prompt's "<pad>")
    scores a marker key MARKER_PULL and any other 0 (no relative position bias); its
    values carry e0 and e1 apart, and its output writes them _CARRY times into e2 and
    e3 of the residual stream; the feed-forward layers and the second layer add nothing;
    the classifier's class 1 reads e2 - e3 of the final state, class 0 nothing."""
    pull = math.sqrt(MARKER_PULL / model.config.d_model)  # q.k = d_model * pull^2
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.fill_(1.0 if name.endswith("layer_norm.weight") else 0.0)
        embedding = model.transformer.shared.weight
        embedding[:, 0] = 1.0
        embedding[marker_ids, 0] = 0.0
        embedding[marker_ids, 1] = 1.0
        attention = model.transformer.encoder.block[0].layer[0].SelfAttention
        attention.q.weight[0, 0] = pull
        attention.k.weight[0, 1] = pull
        attention.v.weight[1, 0] = 1.0
        attention.v.weight[2, 1] = 1.0
        attention.o.weight[2, 1] = _CARRY
        attention.o.weight[3, 2] = _CARRY
        model.classifier.weight[1, 2] = _READ
        model.classifier.weight[1, 3] = -_READ

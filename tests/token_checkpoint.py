"""Token-classification checkpoints shaped like LettuceDetect's, for tests and benchmarks
(no download).

A checkpoint directory holds what the published ones hold: ``config.json``
(``ModernBertForTokenClassification``, two labels), ``model.safetensors`` and a fast
tokenizer (``tokenizer.json`` and ``tokenizer_config.json``). The tokenizer is built
like ModernBERT's and Ettin's: byte-level BPE, no prefix space, ``[CLS] A [SEP] B [SEP]``
for a pair, every token typed 0. Its vocabulary is the 256 byte symbols plus whole-word
merges of ``WORDS``, built here rule by rule instead of trained, so the same ids come out
under any version of the ``tokenizers`` library. The weights are drawn from numpy's
legacy ``RandomState``, whose stream numpy keeps stable across releases: the same seed
gives the same model wherever it is built, which the recorded lettucedetect outputs
(``tests/testdata/token_judge``) rely on.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import ModernBertConfig, ModernBertForTokenClassification, PreTrainedTokenizerFast

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")
# Words that become single tokens (with and without a leading space); anything else
# falls back to shorter pieces down to single bytes, as rare words do in a real vocabulary.
_WORD_TEXT = (
    "passage passages question answer following Briefly Bear mind that your response "
    "should strictly based on the In case do not contain necessary information to please "
    "reply with Unable given output Summarize text "
    "refund refunds policy days within possible are is of a an and or in for by at "
    "parcel left warehouse Monday Tuesday shipping free above euros dollars costs "
    "capital France Paris Berlin city river Seine flows through the store opens closes "
    "hours weekdays weekend support email phone orders delivered two three five ten "
    "What When Where How Which Who The It They You We can will be was were has have "
    "customers return items after purchase receipt original packaging"
)
WORDS = tuple(_WORD_TEXT.split())
TINY: dict[str, Any] = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 3,  # layer 0 attends globally, 1 and 2 in a local window
    "num_attention_heads": 2,
    "local_attention": 16,
    "max_position_embeddings": 1024,
}


def build_tokenizer(words: Iterable[str] = WORDS) -> PreTrainedTokenizerFast:
    """A byte-level BPE fast tokenizer laid out like ModernBERT's."""
    byte_symbols = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab: dict[str, int] = {symbol: index for index, symbol in enumerate(byte_symbols)}
    merges: list[tuple[str, str]] = []
    # Longest words first, each merged left to right and then joined to a leading space
    # (Ġ, the byte-level symbol of a space): BPE applies the lowest-ranked merge first,
    # so a short word's merges must not outrank a long word's inner pairs.
    for word in sorted(dict.fromkeys(words), key=lambda w: (-len(w), w)):
        pieces = [(word[: end - 1], word[end - 1], word[:end]) for end in range(2, len(word) + 1)]
        pieces.append(("\u0120", word, "\u0120" + word))
        for left, right, merged in pieces:
            if merged not in vocab:
                vocab[merged] = len(vocab)
                merges.append((left, right))
    for special in SPECIAL_TOKENS:
        vocab[special] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tokenizer,
        unk_token="[UNK]",  # noqa: S106 (a token, not a password)
        cls_token="[CLS]",  # noqa: S106
        sep_token="[SEP]",  # noqa: S106
        pad_token="[PAD]",  # noqa: S106
        mask_token="[MASK]",  # noqa: S106
        model_input_names=["input_ids", "attention_mask"],
    )


def build_checkpoint(
    directory: Path,
    *,
    size: dict[str, Any] | None = None,
    seed: int = 0,
    classifier_scale: float = 0.15,
) -> Path:
    """Write a two-label ModernBERT token classifier and its tokenizer into ``directory``.

    ``size`` overrides the architecture (a published model's shapes, for benchmarks);
    the vocabulary is then at least as large as the tokenizer's. ``classifier_scale``
    sets the spread of the hallucination logits: at 0.15 a tiny model flags some answer
    tokens and passes others, so spans are neither always empty nor always whole.
    """
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(directory)
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS}
    shape = {**TINY, **(size or {})}
    shape["vocab_size"] = max(int(shape.get("vocab_size", 0)), len(tokenizer))
    config = ModernBertConfig(
        **shape,
        num_labels=2,
        id2label={0: "SUPPORTED", 1: "HALLUCINATED"},
        label2id={"SUPPORTED": 0, "HALLUCINATED": 1},
        pad_token_id=ids["[PAD]"],
        cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"],
        bos_token_id=ids["[CLS]"],
        eos_token_id=ids["[SEP]"],
        classifier_dropout=0.0,
    )
    model = ModernBertForTokenClassification(config)
    model.load_state_dict(_seeded_state(model, seed, classifier_scale))
    model.eval()  # type: ignore[no-untyped-call]
    model.save_pretrained(directory)
    return directory


def _seeded_state(
    model: torch.nn.Module, seed: int, classifier_scale: float
) -> dict[str, torch.Tensor]:
    """Every parameter drawn in name order from one RandomState: norms near 1, the
    classifier at ``classifier_scale``, the rest scaled by their fan-in."""
    random = np.random.RandomState(seed)
    state: dict[str, torch.Tensor] = {}
    for name, tensor in sorted(model.state_dict().items()):
        draw = random.standard_normal(tuple(tensor.shape))
        if "norm" in name:
            values = 1.0 + 0.1 * draw
        elif name.startswith("classifier."):
            values = classifier_scale * draw
        elif tensor.dim() >= 2:
            values = draw / np.sqrt(tensor.shape[-1])
        else:
            values = 0.1 * draw
        state[name] = torch.from_numpy(values.astype(np.float32))
    return state

"""HHEM-2.1-Open: read the published checkpoint without its remote code, and score pairs.

The checkpoint ``vectara/hallucination_evaluation_model`` ships custom model
code, which this module never runs (transformers would have to be told to trust
remote code). Its parts are plain,
though: ``config.json`` (model type ``HHEMv2...``) names a ``foundation``
model (google/flan-t5-base: the T5 configuration and the tokenizer) and a
``prompt``; the weights are a ``T5ForTokenClassification`` stored under the
prefix ``t5.``, with the input embedding shared by the encoder stored once.
This module rebuilds that model from stock ``transformers`` classes and
scores a (premise, hypothesis) pair the way the checkpoint's ``predict``
does: the prompt filled with both texts, right-padded, the logits of the
first position, softmax, the probability of class 1 (consistent).

Batches are sorted by token length and cut into micro-batches padded only to
their own longest pair, so short pairs do not pay for long ones; scores come
back in the order the pairs were given. On a GPU this is what makes batching
pay (``device: cuda``); on a CPU one pair at a time is as fast.

Resolving the files needs no torch, so a missing model is reported without
loading any heavy library.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch

# bf16_autocast: the encoder's matrix products in bf16, its layer norms (T5 computes them
# in fp32 against fp32 weights) and the classifier in fp32; bf16: every weight in bf16;
# int8: dynamically quantized Linear layers (cpu only); onnx: ONNX Runtime in fp32 (cpu only);
# onnx_int8: ONNX Runtime with dynamically quantized int8 weights (cpu only).
Precision = Literal["fp32", "bf16_autocast", "bf16", "int8", "onnx", "onnx_int8"]
ONNX_PRECISIONS: tuple[Precision, ...] = ("onnx", "onnx_int8")

HHEM_REPO = "vectara/hallucination_evaluation_model"
DEFAULT_FOUNDATION = "google/flan-t5-base"
# The commits `rag-monitor models fetch` downloads and the sidecar reads first from the
# cache: the one place they are pinned. Taken from public records of these repositories'
# main branch (no hub access where this was written); bump both after checking the
# HHEM model card and that `rag-monitor models fetch` verifies them.
PINNED_REVISIONS = {
    HHEM_REPO: "8e4a2e6e96c708cc76c2344f7e4757df2515292c",
    DEFAULT_FOUNDATION: "7bcac572ce56db69c1ea7c8af255c5d7c9672fc2",
}
DEFAULT_PROMPT = (
    "<pad> Determine if the hypothesis is true given the premise?\n\n"
    "Premise: {text1}\n\nHypothesis: {text2}"
)
WEIGHT_PREFIX = "t5."
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# A micro-batch grows only while its padding stays under this share of its positions:
# padded positions cost as much as real ones.
MAX_PADDING_SHARE = 0.2
FETCH_COMMAND = "rag-monitor models fetch"
FETCH_HINT = (
    f"on a machine with internet access run `{FETCH_COMMAND}` (add --config FILE and "
    "--to DIR as needed; it prints the config line to use), then copy the Hugging Face cache "
    "(~/.cache/huggingface/hub, or $HF_HUB_CACHE) or DIR here; by hand, "
    "`huggingface-cli download vectara/hallucination_evaluation_model` and "
    "`huggingface-cli download google/flan-t5-base` fill the cache too, or point "
    "detectors.faithfulness.model at a directory holding the checkpoint"
)


class ModelMissingError(FileNotFoundError):
    """The checkpoint or its foundation model is neither a directory nor in the local cache."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        super().__init__(f"HHEM model {name!r} not found ({reason}); {FETCH_HINT}")


@dataclass(frozen=True, slots=True)
class HhemCheckpoint:
    """The files of an HHEM-2.1 checkpoint, resolved to local paths."""

    directory: Path
    weights: Path
    foundation: Path
    prompt: str


def resolve_model_dir(name: str, cache_dir: str | Path | None = None) -> Path:
    """A local directory for ``name``: the directory itself, or a hub id's cached snapshot.

    Never downloads: hub ids are read from the local Hugging Face cache only,
    so the sidecar behaves the same with or without ``HF_HUB_OFFLINE``. The
    pinned revision is read first, then whatever the cache's ``main`` points to
    (a cache filled by hand with ``huggingface-cli download``).
    """
    path = Path(name).expanduser()
    if path.is_dir():
        return path
    if path.is_absolute() or name.startswith(".") or name.count("/") != 1:
        raise ModelMissingError(name, "no such directory")
    try:
        return cached_snapshot(name, PINNED_REVISIONS.get(name), cache_dir)
    except LookupError as exc:
        raise ModelMissingError(name, str(exc)) from exc


def cached_snapshot(name: str, pinned: str | None, cache_dir: str | Path | None) -> Path:
    """Hub id ``name``'s snapshot in the local Hugging Face cache, never downloading: the
    ``pinned`` revision first, then whatever the cache's ``main`` points to. Raises
    ``LookupError`` saying why when neither is there."""
    from huggingface_hub import snapshot_download

    error: Exception | None = None
    for revision in dict.fromkeys((pinned, None)):
        try:
            return Path(
                snapshot_download(
                    name, revision=revision, local_files_only=True, cache_dir=cache_dir
                )
            )
        except Exception as exc:  # LocalEntryNotFoundError and friends, by version
            error = exc
    raise LookupError(f"not in the local Hugging Face cache: {error}") from error


def read_checkpoint(model: str, cache_dir: str | Path | None = None) -> HhemCheckpoint:
    """Resolve an HHEM-2.1 checkpoint and its foundation model; no heavy import."""
    directory = resolve_model_dir(model, cache_dir)
    try:
        config: dict[str, Any] = json.loads((directory / "config.json").read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelMissingError(model, f"no readable config.json in {directory}") from exc
    model_type = str(config.get("model_type", ""))
    if not model_type.startswith("HHEMv2"):
        raise ValueError(f"{directory}/config.json: model_type {model_type!r} is not HHEMv2")
    weights = next((directory / f for f in WEIGHT_FILES if (directory / f).is_file()), None)
    if weights is None:
        raise ModelMissingError(model, f"no {' or '.join(WEIGHT_FILES)} in {directory}")
    foundation_name = str(config.get("foundation") or DEFAULT_FOUNDATION)
    relative = directory / foundation_name
    foundation = relative if relative.is_dir() and not Path(foundation_name).is_absolute() else None
    return HhemCheckpoint(
        directory=directory,
        weights=weights,
        foundation=foundation or resolve_model_dir(foundation_name, cache_dir),
        prompt=str(config.get("prompt") or DEFAULT_PROMPT),
    )


@dataclass(frozen=True, slots=True)
class PreparedPair:
    """A pair turned into model input: its token ids, and whether the premise was cut."""

    input_ids: list[int]
    truncated: bool


class HhemScorer:
    """An HHEM-2.1 model in memory; thread-confined to the worker that scores with it."""

    def __init__(
        self,
        checkpoint: HhemCheckpoint,
        *,
        device: str = "cpu",
        precision: Precision = "fp32",
        max_premise_tokens: int = 2048,
    ) -> None:
        import torch
        from transformers import AutoTokenizer, T5Config, T5ForTokenClassification

        self.checkpoint = checkpoint
        self.device = torch.device(device)
        self.max_premise_tokens = max_premise_tokens
        foundation = str(checkpoint.foundation)
        self.tokenizer = AutoTokenizer.from_pretrained(foundation)  # type: ignore[no-untyped-call]
        self.tokenizer.padding_side = "right"
        self._pad_id = int(self.tokenizer.pad_token_id or 0)
        config = T5Config.from_pretrained(foundation, num_labels=2)
        model = T5ForTokenClassification(config)
        model.load_state_dict(load_classifier_weights(checkpoint.weights), strict=True)
        model.eval()  # type: ignore[no-untyped-call]
        self.precision = precision
        self.model: torch.nn.Module = apply_precision(model, precision).to(self.device)
        self._session = _onnx_session(self.model, precision)

    def converted(self, precision: Precision) -> HhemScorer:
        """This fp32 scorer in another precision; it shares the tokenizer, and for
        ``bf16_autocast`` and the ONNX precisions the torch weights too (bf16 and int8
        convert a copy; ONNX Runtime holds its own)."""
        if self.precision != "fp32":
            raise ValueError(f"only an fp32 scorer converts; this one is {self.precision}")
        other = copy.copy(self)
        other.precision = precision
        if precision in ("bf16", "int8"):
            other.model = apply_precision(copy.deepcopy(self.model), precision)
        other._session = _onnx_session(self.model, precision)
        return other

    def prepare(self, premise: str, hypothesis: str) -> PreparedPair:
        """Fill the prompt and tokenize it; a premise over the token budget is cut at its end."""
        truncated = False
        premise_ids = self.tokenizer(premise, add_special_tokens=False)["input_ids"]
        if len(premise_ids) > self.max_premise_tokens:
            premise = self.tokenizer.decode(premise_ids[: self.max_premise_tokens])
            truncated = True
        text = self.checkpoint.prompt.format(text1=premise, text2=hypothesis)
        return PreparedPair(list(self.tokenizer(text)["input_ids"]), truncated)

    def score_prepared(self, pairs: Sequence[PreparedPair]) -> list[float]:
        """One forward pass over ``pairs`` (right-padded): P(consistent) for each."""
        import torch

        if not pairs:
            return []
        width = max(len(p.input_ids) for p in pairs)
        ids = torch.full((len(pairs), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(pairs), width), dtype=torch.long)
        for row, pair in enumerate(pairs):
            ids[row, : len(pair.input_ids)] = torch.tensor(pair.input_ids, dtype=torch.long)
            mask[row, : len(pair.input_ids)] = 1
        if self.device.type == "cuda":  # pinned: the copy to the GPU need not wait
            ids, mask = ids.pin_memory(), mask.pin_memory()
        with torch.inference_mode():
            logits = self._first_position_logits(
                ids.to(self.device, non_blocking=True), mask.to(self.device, non_blocking=True)
            )
            probabilities = torch.softmax(logits.float(), dim=-1)[:, 1]
        return [float(p) for p in probabilities.cpu()]

    def score_batched(
        self,
        pairs: Sequence[PreparedPair],
        batch_size: int,
        *,
        before_batch: Callable[[], None] = lambda: None,
    ) -> list[float]:
        """Scores of ``pairs`` in their order, computed in length-sorted micro-batches of at
        most ``batch_size``, each padded to its own longest pair; ``before_batch`` runs
        before each forward pass (a stop check may raise there)."""
        scores = [0.0] * len(pairs)
        for indices in length_batches(pairs, batch_size):
            before_batch()
            batch = self.score_prepared([pairs[i] for i in indices])
            for index, score in zip(indices, batch, strict=True):
                scores[index] = score
        return scores

    def score(self, pairs: Sequence[tuple[str, str]], batch_size: int = 1) -> list[float]:
        """Score (premise, hypothesis) pairs, ``batch_size`` pairs per forward pass at most."""
        prepared = [self.prepare(premise, hypothesis) for premise, hypothesis in pairs]
        return self.score_batched(prepared, batch_size)

    def _first_position_logits(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """T5ForTokenClassification's logits at position 0 (dropout is off in eval), the
        only position HHEM reads; under bf16_autocast the classifier runs outside it."""
        import torch

        if self._session is not None:
            from detectors.faithfulness.onnx_runtime import session_logits

            return session_logits(self._session, ids, mask)
        model: Any = self.model
        autocast = self.precision == "bf16_autocast"
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=autocast):
            states = model.transformer(input_ids=ids, attention_mask=mask).last_hidden_state
        first = states[:, 0, :]
        logits: torch.Tensor = model.classifier(first.float() if autocast else first)
        return logits


def length_batches(
    pairs: Sequence[PreparedPair], batch_size: int, max_padding_share: float = MAX_PADDING_SHARE
) -> list[list[int]]:
    """Indices of ``pairs`` grouped into batches: sorted by length, at most ``batch_size``
    each, cut early where the padding would pass ``max_padding_share`` of the real tokens."""
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i].input_ids))
    batches: list[list[int]] = []
    current: list[int] = []
    real = 0
    for index in order:
        length = len(pairs[index].input_ids)
        padded = length * (len(current) + 1)  # sorted: this pair is the longest so far
        if current and (
            len(current) >= batch_size or padded - (real + length) > max_padding_share * padded
        ):
            batches.append(current)
            current, real = [], 0
        current.append(index)
        real += length
    if current:
        batches.append(current)
    return batches


def load_classifier_weights(path: Path) -> dict[str, torch.Tensor]:
    """The ``t5.``-prefixed weights of an HHEM checkpoint as a T5ForTokenClassification state.

    The encoder's input embedding is the shared embedding; a checkpoint that
    stores it once gets the tie restored here.
    """
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        stored = load_file(str(path))
    else:
        stored = torch.load(str(path), map_location="cpu", weights_only=True)
    state = {
        key[len(WEIGHT_PREFIX) :]: value
        for key, value in stored.items()
        if key.startswith(WEIGHT_PREFIX)
    }
    if not state:
        raise ValueError(f"{path}: no weights under the prefix {WEIGHT_PREFIX!r}")
    shared, embed = "transformer.shared.weight", "transformer.encoder.embed_tokens.weight"
    if shared in state and embed not in state:
        state[embed] = state[shared]
    elif embed in state and shared not in state:
        state[shared] = state[embed]
    return state


def apply_precision(model: torch.nn.Module, precision: Precision) -> torch.nn.Module:
    """Cast to bf16, or replace Linear layers with dynamic int8 ones (cpu), in place for
    bf16; fp32 and bf16_autocast (applied in the forward pass) leave the model as it is."""
    import torch

    if precision == "bf16":
        return model.to(dtype=torch.bfloat16)
    if precision == "int8":
        with warnings.catch_warnings():
            # torch.ao.quantization is deprecated in favour of torchao, which is not a
            # dependency here; the eager dynamic quantization still works.
            warnings.simplefilter("ignore")
            from torch.ao.quantization import quantize_dynamic

            quantized: torch.nn.Module = quantize_dynamic(  # type: ignore[no-untyped-call]
                model, {torch.nn.Linear}, dtype=torch.qint8
            )
        return quantized
    return model


def _onnx_session(model: torch.nn.Module, precision: Precision) -> Any:
    """An ONNX Runtime session for the ONNX precisions; None for the torch ones."""
    if precision not in ONNX_PRECISIONS:
        return None
    from detectors.faithfulness.onnx_runtime import onnx_session

    return onnx_session(model, int8=precision == "onnx_int8")


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op threads; None means the cores the sidecar may use (its CPU
    affinity capped by its cgroup CPU quota, ``cores.py``). Returns the count set."""
    import torch

    from detectors.faithfulness.cores import allowed_cores

    count = threads or allowed_cores()
    torch.set_num_threads(count)
    return count

"""The token classifier the ``token_classifier`` judge runs: LettuceDetect
(``KRLabsOrg/lettucedect-*-modernbert-en-v1``, ModernBERT) and TinyLettuce
(``KRLabsOrg/tinylettuce-ettin-*-en``, Ettin encoders), two-label token classifiers (0
supported, 1 hallucinated, MIT licence): where the checkpoint is, how a (premise,
question, answer) becomes model inputs, and each answer token's hallucination
probability. ``token_judge.py`` turns those into verdicts and spans.

They read ``[CLS] prompt [SEP] answer [SEP]``, where the prompt is RAGTruth's instruction
with the question and numbered passages (``QA_TEMPLATE``; without a question
``SUMMARY_TEMPLATE``), and label each answer token. The input is built here as
lettucedetect 0.2.3's ``TransformerDetector`` builds it, and
``tests/unit/detectors/faithfulness/test_token_judge.py`` checks it against that code's
recorded outputs:

- the passages are the premise's blank-line separated blocks (the worker joins the
  contexts with a blank line);
- when the prompt and the answer do not fit ``max_length``, the passages are grouped,
  in order and greedily, into chunks whose prompt (the whole template each time) fits
  next to the answer; each chunk is one model input, and each answer token keeps its
  highest hallucination probability over the chunks: a token counts as supported only
  when every chunk supports it. A single passage longer than a chunk's room is cut at
  token boundaries into pieces that fit (lettucedetect would truncate it), so evidence
  is only cut, and the result marked ``truncated``, when the question alone leaves the
  passages no room.

Resolving the checkpoint needs no torch (a missing model is reported without loading any
heavy library).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import structlog

from detectors.faithfulness.hhem import (
    FETCH_COMMAND,
    ModelMissingError,
    PreparedPair,
    apply_precision,
    cached_snapshot,
    length_batches,
)

if TYPE_CHECKING:
    import torch


log = structlog.get_logger("rag_monitor.faithfulness")

TINYLETTUCE_68M = "KRLabsOrg/tinylettuce-ettin-68m-en"
TINYLETTUCE_17M = "KRLabsOrg/tinylettuce-ettin-17m-en"
LETTUCEDETECT_BASE = "KRLabsOrg/lettucedect-base-modernbert-en-v1"
LETTUCEDETECT_LARGE = "KRLabsOrg/lettucedect-large-modernbert-en-v1"
# The default: the most accurate TinyLettuce on RAGTruth (74.97 % F1 on its model card,
# against 76.07 % for LettuceDetect-base at 150M parameters), at 68M parameters.
DEFAULT_TOKEN_MODEL = TINYLETTUCE_68M
# The revisions `rag-monitor models fetch` downloads and the judge reads first from the
# cache. No public record of these repositories' commit hashes was at hand where this was
# written, so each is pinned to its hub branch `main`; replace each with the commit hash
# of the model card checked (and `rag-monitor models fetch` verifies it loads).
PINNED_REVISIONS: dict[str, str] = {
    TINYLETTUCE_68M: "main",
    TINYLETTUCE_17M: "main",
    LETTUCEDETECT_BASE: "main",
    LETTUCEDETECT_LARGE: "main",
}
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# What LettuceDetect's and TinyLettuce's models were trained at (their model cards:
# "up to 4096 tokens"), and lettucedetect's default; ModernBERT and Ettin accept 8k.
DEFAULT_MAX_LENGTH = 4096

TokenPrecision = Literal["fp32", "bf16_autocast", "bf16", "int8"]
TOKEN_PRECISIONS: tuple[TokenPrecision, ...] = ("fp32", "bf16_autocast", "bf16", "int8")

# RAGTruth's prompts in English, as lettucedetect's prompts/qa_prompt_en.txt and
# summary_prompt_en.txt hold them (no trailing newline).
PASSAGE_WORD = "passage"
QA_TEMPLATE = (
    "Briefly answer the following question:\n{question}\n"
    "Bear in mind that your response should be strictly based on the following "
    "{count} passages:\n{passages}\n"
    "In case the passages do not contain the necessary information to answer the question, "
    'please reply with: "Unable to answer based on given passages."\noutput:'
)
SUMMARY_TEMPLATE = "Summarize the following text:\n{passages}\noutput:"
FETCH_HINT = (
    f"on a machine with internet access run `{FETCH_COMMAND}` (add --config FILE and "
    "--to DIR as needed; it prints the config line to use), then copy the Hugging Face cache "
    "(~/.cache/huggingface/hub, or $HF_HUB_CACHE) or DIR here; by hand, "
    "`huggingface-cli download MODEL` fills the cache too, or point "
    "detectors.faithfulness.token_classifier.model at a directory holding the checkpoint"
)


class TokenModelMissingError(ModelMissingError):
    """The token classifier is neither a directory nor in the local cache (a
    ``ModelMissingError``: the worker and ``rag-monitor models`` handle both alike)."""

    def __init__(self, name: str, reason: str) -> None:
        # Skips ModelMissingError's own message, which tells how to fetch HHEM.
        FileNotFoundError.__init__(
            self,
            f"token classifier model {name!r} not found ({reason}); "
            + FETCH_HINT.replace("MODEL", name if name.count("/") == 1 else "<hub id>"),
        )
        self.name = name


def resolve_token_model(name: str, cache_dir: str | Path | None = None) -> Path:
    """A local directory holding the checkpoint ``name`` (a directory, or a hub id's
    snapshot in the local Hugging Face cache: the pinned revision, then ``main``); never
    downloads, and imports no torch. Raises ``TokenModelMissingError``."""
    path = Path(name).expanduser()
    if path.is_dir():
        directory = path
    elif path.is_absolute() or name.startswith(".") or name.count("/") != 1:
        raise TokenModelMissingError(name, "no such directory")
    else:
        try:
            directory = cached_snapshot(name, PINNED_REVISIONS.get(name), cache_dir)
        except LookupError as exc:
            raise TokenModelMissingError(name, str(exc)) from exc
    if not (directory / "config.json").is_file():
        raise TokenModelMissingError(name, f"no config.json in {directory}")
    if not any((directory / f).is_file() for f in WEIGHT_FILES):
        raise TokenModelMissingError(name, f"no {' or '.join(WEIGHT_FILES)} in {directory}")
    if not any((directory / f).is_file() for f in TOKENIZER_FILES):
        raise TokenModelMissingError(name, f"no tokenizer ({', '.join(TOKENIZER_FILES)})")
    return directory


def format_prompt(passages: Sequence[str], question: str | None) -> str:
    """The model's first segment: the template filled with the question and the passages,
    numbered from 1 and one per line."""
    block = "\n".join(f"{PASSAGE_WORD} {i}: {p}" for i, p in enumerate(passages, start=1))
    if question is None:
        return SUMMARY_TEMPLATE.format(passages=block)
    return QA_TEMPLATE.format(question=question, count=len(passages), passages=block)


def split_passages(premise: str) -> list[str]:
    """The premise's passages: its blocks between blank lines (how the worker joined the
    contexts), blank blocks left out. A context holding a blank line counts as two."""
    return [block for block in premise.split("\n\n") if block.strip()]


@dataclass(frozen=True, slots=True)
class Chunk:
    """One model input: its token ids, the positions of the answer's tokens in it, and
    whether the tokenizer cut its prompt to fit."""

    input_ids: list[int]
    answer_positions: list[int]
    truncated: bool


@dataclass(frozen=True, slots=True)
class EncodedPair:
    """A pair as model inputs: its chunks, and the answer's tokens as (start, end)
    character offsets in the answer, in the order of ``Chunk.answer_positions``."""

    chunks: list[Chunk]
    offsets: list[tuple[int, int]]

    @property
    def truncated(self) -> bool:
        return any(chunk.truncated for chunk in self.chunks)


class AnswerTooLongError(ValueError):
    """The answer alone does not fit the model input: nothing of it could be judged."""


class TokenClassifier:
    """A token-classification checkpoint in memory; thread-confined like the judge."""

    def __init__(
        self,
        directory: Path,
        *,
        device: str = "cpu",
        precision: TokenPrecision = "fp32",
        max_length: int | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForTokenClassification, AutoTokenizer

        self.device = torch.device(device)
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(directory))  # type: ignore[no-untyped-call]
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError(f"{directory}: the tokenizer is not a fast one (no offsets)")
        model: Any = AutoModelForTokenClassification.from_pretrained(str(directory))
        if model.config.num_labels != 2:
            raise ValueError(
                f"{directory}: {model.config.num_labels} labels; a hallucination token "
                "classifier has 2 (0 supported, 1 hallucinated)"
            )
        model.eval()
        model_limit = int(getattr(model.config, "max_position_embeddings", DEFAULT_MAX_LENGTH))
        self.max_length = max_length or min(model_limit, DEFAULT_MAX_LENGTH)
        if self.max_length > model_limit:
            raise ValueError(
                f"token_classifier.max_length {self.max_length} exceeds the model's "
                f"{model_limit} positions"
            )
        # Lengths are measured on whole texts before chunking; the tokenizer's warning
        # about sequences over its maximum would fire on every long premise.
        self.tokenizer.model_max_length = 1 << 62
        self._specials = int(self.tokenizer.num_special_tokens_to_add(pair=True))
        self._pad_id = int(self.tokenizer.pad_token_id or 0)
        self.precision: TokenPrecision = precision
        self.model: torch.nn.Module = apply_precision(model, precision).to(self.device)

    # ------------------------------------------------------------------ encoding

    def count(self, text: str) -> int:
        """Tokens of ``text`` alone, without special tokens."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def encode(self, premise: str, question: str | None, answer: str) -> EncodedPair | None:
        """The pair's chunks; None when the answer has no token covering a character. Raises
        ``AnswerTooLongError`` when the answer leaves no room for a prompt."""
        answer_tokens = self.count(answer)
        if answer_tokens == 0:
            return None
        room = self.max_length - answer_tokens - self._specials
        if room <= 0:
            raise AnswerTooLongError(f"{answer_tokens} answer tokens, max_length {self.max_length}")
        groups = self._groups(split_passages(premise), question, room)
        chunks = [self._chunk(format_prompt(g, question), answer, room) for g in groups]
        encoded = [self._answer_offsets(chunk_encoding) for chunk_encoding, _ in chunks]
        offsets = encoded[0][1]
        if not offsets:  # only zero-width tokens: no character to judge
            return None
        return EncodedPair(
            [
                Chunk(list(enc["input_ids"]), positions, truncated)
                for (enc, truncated), (positions, _) in zip(chunks, encoded, strict=True)
            ],
            offsets,
        )

    def _groups(self, passages: list[str], question: str | None, room: int) -> list[list[str]]:
        """Passages grouped so that each group's prompt fits ``room`` tokens: all in one
        when they fit (lettucedetect's order of checks, so the same groups come out)."""
        if self.count(format_prompt(passages, question)) <= room:
            return [passages]
        passage_room = room - self.count(format_prompt([""], question))
        if passage_room <= 0:  # the question alone fills the input: one cut chunk
            return [passages]
        passages = self._fit_passages(passages, passage_room)
        groups: list[list[str]] = []
        current: list[str] = []
        used = 0
        for index, passage in enumerate(passages):
            # Counted with its number in the whole list and a newline after the previous
            # passage of its group, as lettucedetect counts.
            cost = self.count(f"{PASSAGE_WORD} {index + 1}: {passage}")
            if current and used + 1 + cost > passage_room:
                groups.append(current)
                current, used = [], 0
            used += cost + (1 if current else 0)
            current.append(passage)
        if current:
            groups.append(current)
        return groups or [passages]

    def _fit_passages(self, passages: list[str], passage_room: int) -> list[str]:
        """Each passage too long for a chunk cut at token boundaries into pieces that fit;
        the others unchanged."""
        fitted: list[str] = []
        for passage in passages:
            label = f"{PASSAGE_WORD} {len(fitted) + 1}: "
            if self.count(label + passage) <= passage_room:
                fitted.append(passage)
                continue
            fitted.extend(self._pieces(passage, passage_room))
        return fitted

    def _pieces(self, passage: str, passage_room: int) -> list[str]:
        """``passage`` in consecutive pieces, each of at most ``passage_room`` tokens with
        a passage label in front (numbers up to 6 digits allowed for)."""
        starts = [start for start, _ in self._offsets(passage)]
        window = max(1, passage_room - self.count(f"{PASSAGE_WORD} 999999: "))
        while True:
            cuts = [*starts[::window], len(passage)]
            pieces = [passage[a:b] for a, b in itertools.pairwise(cuts) if a < b]
            longest = max(self.count(f"{PASSAGE_WORD} 999999: {p}") for p in pieces)
            if longest <= passage_room or window == 1:
                return pieces
            # A cut can join bytes into other tokens than the whole text had: tighten.
            window = max(1, window - (longest - passage_room))

    def _offsets(self, text: str) -> list[tuple[int, int]]:
        encoding = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return [(int(a), int(b)) for a, b in encoding["offset_mapping"]]

    def _chunk(self, prompt: str, answer: str, room: int) -> tuple[Any, bool]:
        """The tokenizer's encoding of (prompt, answer), the prompt cut at its end when it
        is longer than ``room`` (the answer never is), and whether it was."""
        encoding = self.tokenizer(
            prompt,
            answer,
            truncation="only_first",
            max_length=self.max_length,
            return_offsets_mapping=True,
        )
        return encoding, self.count(prompt) > room

    @staticmethod
    def _answer_offsets(encoding: Any) -> tuple[list[int], list[tuple[int, int]]]:
        """Positions and offsets (within the answer) of the answer's tokens: those of the
        second sequence, less any of zero width, which cover no character."""
        positions: list[int] = []
        offsets: list[tuple[int, int]] = []
        for position, sequence in enumerate(encoding.sequence_ids()):
            start, end = encoding["offset_mapping"][position]
            if sequence == 1 and end > start:
                positions.append(position)
                offsets.append((int(start), int(end)))
        return positions, offsets

    # ------------------------------------------------------------------- scoring

    def chunk_probabilities(self, chunks: Sequence[Chunk]) -> list[list[float]]:
        """One forward pass over ``chunks`` (right-padded): each chunk's hallucination
        probability at its answer positions."""
        import torch

        width = max(len(c.input_ids) for c in chunks)
        ids = torch.full((len(chunks), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunks), width), dtype=torch.long)
        for row, chunk in enumerate(chunks):
            ids[row, : len(chunk.input_ids)] = torch.tensor(chunk.input_ids, dtype=torch.long)
            mask[row, : len(chunk.input_ids)] = 1
        autocast = self.precision == "bf16_autocast"
        with (
            torch.inference_mode(),
            torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=autocast),
        ):
            logits = self.model(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device)
            ).logits
        hallucinated = torch.softmax(logits.float(), dim=-1)[..., 1].cpu()
        return [
            [float(p) for p in hallucinated[row, chunk.answer_positions]]
            for row, chunk in enumerate(chunks)
        ]

    def token_probabilities(self, encoded: EncodedPair, batch_size: int = 1) -> list[float]:
        """Each answer token's highest hallucination probability over the pair's chunks."""
        highest = [0.0] * len(encoded.offsets)
        prepared = [PreparedPair(c.input_ids, c.truncated) for c in encoded.chunks]
        for indices in length_batches(prepared, batch_size):
            batch = self.chunk_probabilities([encoded.chunks[i] for i in indices])
            for probabilities in batch:
                highest = [max(a, b) for a, b in zip(highest, probabilities, strict=True)]
        return highest

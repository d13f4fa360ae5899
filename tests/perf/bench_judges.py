"""The local judges' CPU cost per pair at 512 and 2,048 input tokens, on one thread.

Each judge's model is built at its published architecture with random weights: a
forward pass costs the same whatever the weights hold (its cost is set by the shapes),
so the speeds are the real models' and the scores are meaningless. Three judges:

- HHEM-2.1-Open: ``T5ForTokenClassification`` at google/flan-t5-base's encoder shapes
  (``tests/hhem_checkpoint.py``: ``FLAN_T5_BASE``), loaded by the sidecar's HHEM loader;
  HHEM reads the first position of the encoder's output.
- LettuceDetect-base (``KRLabsOrg/lettucedect-base-modernbert-en-v1``): ModernBERT-base,
  ``MODERNBERT_BASE`` below, loaded by the token judge's loader.
- TinyLettuce (``KRLabsOrg/tinylettuce-ettin-68m-en``, the token judge's default, and
  ``-17m-en``): the Ettin encoders, ``ETTIN_68M`` and ``ETTIN_17M`` below.

Each is timed on one model input of exactly 512 and 2,048 tokens (the judge's own
prepared input: token ids, no tokenization), in fp32 and in the fastest of the other
precisions it supports on a CPU (measured first at 512 tokens: HHEM bf16_autocast,
bf16, int8, onnx, onnx_int8; the token judge bf16_autocast, bf16, int8). Printed per
row: pairs per CPU-second (process CPU time: with one thread, the cost a sidecar's
core pays) and the wall-clock latency of one pair.

    python tests/perf/bench_judges.py                  # the table (about 5 minutes)
    python tests/perf/bench_judges.py --judges tinylettuce-17m --lengths 512
    python tests/perf/bench_judges.py --quick          # tiny shapes: checks the script

Configuration sources (the values that set the cost: widths, depths, heads, vocabulary,
the attention window and how often a layer attends globally):

- ModernBERT-base: transformers' ``ModernBertConfig``, whose defaults are
  answerdotai/ModernBERT-base's (transformers 4.57 documentation: vocab_size 50368,
  hidden_size 768, intermediate_size 1152, num_hidden_layers 22, num_attention_heads 12,
  max_position_embeddings 8192, global_attn_every_n_layers 3, local_attention 128,
  global_rope_theta 160000, local_rope_theta 10000). LettuceDetect-base fine-tunes it.
- Ettin 17M and 68M: JHU-CLSP/ettin-encoder-vs-decoder, pretraining/configs/standard/
  very_tiny/encoder_very_tiny.yaml and mini/encoder_mini.yaml (commit 496a3f42), with the
  context-extension phase's rope bases and length from very_tiny/de_decay (commit 86fe50c4:
  rotary_emb_base 160000, local_attn_rotary_emb_base 10000, max_seq_len 7999). The
  parameter counts they give, 16.9M and 68.2M, are the published models' sizes.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from detectors.faithfulness.hhem import (  # noqa: E402
    HhemScorer,
    Precision,
    PreparedPair,
    read_checkpoint,
    set_threads,
)
from detectors.faithfulness.precision import CPU_CANDIDATES  # noqa: E402
from detectors.faithfulness.token_classifier import (  # noqa: E402
    TOKEN_PRECISIONS,
    Chunk,
    TokenClassifier,
)
from tests import hhem_checkpoint, token_checkpoint  # noqa: E402

MODERNBERT_BASE: dict[str, Any] = {
    "vocab_size": 50368,
    "hidden_size": 768,
    "intermediate_size": 1152,
    "num_hidden_layers": 22,
    "num_attention_heads": 12,
    "max_position_embeddings": 8192,
    "global_attn_every_n_layers": 3,
    "local_attention": 128,
    "global_rope_theta": 160000.0,
    "local_rope_theta": 10000.0,
    "norm_eps": 1e-5,
}
ETTIN_COMMON: dict[str, Any] = {
    "vocab_size": 50368,
    "max_position_embeddings": 7999,
    "global_attn_every_n_layers": 3,
    "local_attention": 128,
    "global_rope_theta": 160000.0,
    "local_rope_theta": 10000.0,
    "norm_eps": 1e-5,
}
ETTIN_17M: dict[str, Any] = {
    **ETTIN_COMMON,
    "hidden_size": 256,
    "intermediate_size": 384,
    "num_hidden_layers": 7,
    "num_attention_heads": 4,
}
ETTIN_68M: dict[str, Any] = {
    **ETTIN_COMMON,
    "hidden_size": 512,
    "intermediate_size": 768,
    "num_hidden_layers": 19,
    "num_attention_heads": 8,
}
QUICK_TOKEN: dict[str, Any] = {**token_checkpoint.TINY, "max_position_embeddings": 4096}
ANSWER_TOKENS = 64  # the answer's share of a token judge's input: its scored positions


@dataclass
class Judge:
    """One judge at one precision: a callable that scores one prepared input of n tokens."""

    name: str
    parameters: int
    precisions: tuple[str, ...]
    runner: Callable[[str], Callable[[int], None]]  # precision -> run(tokens)


def hhem_judge(directory: Path, quick: bool) -> Judge:
    size = hhem_checkpoint.TINY if quick else hhem_checkpoint.FLAN_T5_BASE
    checkpoint_dir, model = hhem_checkpoint.build_checkpoint(directory / "hhem", size=size)
    parameters = sum(p.numel() for p in model.parameters())
    del model
    fp32 = HhemScorer(read_checkpoint(str(checkpoint_dir)), max_premise_tokens=1 << 20)
    ids = fp32.prepare("premise " * 1200, "hypothesis")
    eos = ids.input_ids[-1]

    def runner(precision: str) -> Callable[[int], None]:
        scorer = fp32 if precision == "fp32" else fp32.converted(_hhem_precision(precision))

        def run(tokens: int) -> None:
            pair = PreparedPair([*ids.input_ids[: tokens - 1], eos], False)
            scorer.score_prepared([pair])

        return run

    return Judge("HHEM-2.1-Open (T5-base)", parameters, ("fp32", *CPU_CANDIDATES), runner)


def _hhem_precision(name: str) -> Precision:
    for precision in CPU_CANDIDATES:
        if precision == name:
            return precision
    raise ValueError(name)


def token_judge(directory: Path, name: str, size: dict[str, Any]) -> Judge:
    checkpoint_dir = token_checkpoint.build_checkpoint(directory / name, size=size)
    loaded: dict[str, TokenClassifier] = {}

    def runner(precision: str) -> Callable[[int], None]:
        if precision not in loaded:
            loaded.clear()  # one model in memory at a time
            loaded[precision] = TokenClassifier(
                checkpoint_dir, precision=_token_precision(precision), max_length=4096
            )
        classifier = loaded[precision]
        filler = int(classifier.tokenizer.convert_tokens_to_ids("\u0120passage"))

        def run(tokens: int) -> None:
            ids = [filler] * tokens
            positions = list(range(tokens - 1 - ANSWER_TOKENS, tokens - 1))
            classifier.chunk_probabilities([Chunk(ids, positions, False)])

        return run

    probe = TokenClassifier(checkpoint_dir, max_length=4096)
    parameters = sum(p.numel() for p in probe.model.parameters())
    del probe
    return Judge(name, parameters, TOKEN_PRECISIONS, runner)


def _token_precision(name: str) -> Any:
    if name not in TOKEN_PRECISIONS:
        raise ValueError(name)
    return name


def measure(run: Callable[[int], None], tokens: int, repeats: int) -> tuple[float, float]:
    """(pairs per CPU-second, wall seconds per pair) over ``repeats`` calls, after one
    warm-up call that pays the first-call allocations."""
    run(tokens)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(repeats):
        run(tokens)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return repeats / max(cpu, 1e-9), wall / repeats


def fastest(judge: Judge, tokens: int, repeats: int) -> tuple[str, dict[str, float]]:
    """The fastest non-fp32 precision at ``tokens`` and each one's pairs per CPU-second
    (a precision that fails here is reported and left out)."""
    speeds: dict[str, float] = {}
    for precision in judge.precisions[1:]:
        try:
            speeds[precision], _ = measure(judge.runner(precision), tokens, repeats)
        except Exception as exc:  # a kernel or exporter this machine lacks
            print(f"  {judge.name} {precision}: unavailable ({type(exc).__name__}: {exc})")
    return max(speeds, key=lambda p: speeds[p]), speeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    choices = ["hhem", "lettucedetect-base", "tinylettuce-68m", "tinylettuce-17m"]
    parser.add_argument("--judges", nargs="*", choices=choices, default=choices)
    parser.add_argument("--lengths", type=int, nargs="*", default=[512, 2048])
    parser.add_argument("--repeats", type=int, default=2, help="timed calls per row")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, to check the script")
    args = parser.parse_args()
    threads = set_threads(args.threads)
    cpu = platform.processor() or platform.machine()
    print(
        f"torch {torch.__version__}, {threads} thread(s), cpu capability "
        f"{torch.backends.cpu.get_cpu_capability()} ({cpu}); random weights at the published "
        "shapes: the speeds are the real models', the scores are not"
    )
    sizes = {
        "lettucedetect-base": ("LettuceDetect-base (ModernBERT-base)", MODERNBERT_BASE),
        "tinylettuce-68m": ("TinyLettuce-68M (Ettin 68M)", ETTIN_68M),
        "tinylettuce-17m": ("TinyLettuce-17M (Ettin 17M)", ETTIN_17M),
    }
    rows: list[tuple[str, str, int, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.judges:
            started = time.perf_counter()
            if key == "hhem":
                judge = hhem_judge(Path(tmp), args.quick)
            else:
                name, size = sizes[key]
                judge = token_judge(Path(tmp), name, QUICK_TOKEN if args.quick else size)
            print(
                f"{judge.name}: {judge.parameters / 1e6:.1f}M parameters, built in "
                f"{time.perf_counter() - started:.0f} s"
            )
            best, speeds = fastest(judge, min(args.lengths), args.repeats)
            print(
                f"  at {min(args.lengths)} tokens, pairs per CPU-second: "
                + ", ".join(f"{p} {s:.2f}" for p, s in speeds.items())
                + f" -> {best}"
            )
            for precision in ("fp32", best):
                run = judge.runner(precision)
                for tokens in args.lengths:
                    per_cpu_s, latency = measure(run, tokens, args.repeats)
                    rows.append((judge.name, precision, tokens, per_cpu_s, latency))
            del judge
    print()
    print("| judge | precision | tokens | pairs per CPU-second | latency per pair (s) |")
    print("|---|---|---:|---:|---:|")
    for name, precision, tokens, per_cpu_s, latency in rows:
        print(f"| {name} | {precision} | {tokens} | {per_cpu_s:.2f} | {latency:.3f} |")


if __name__ == "__main__":
    main()

"""HHEM scoring speed per precision, and what ``precision: auto`` picks on this machine.

A flan-t5-base-sized T5ForTokenClassification with random weights is written in
the published HHEM layout and loaded through the sidecar's own loader (so the
cost is that of the real checkpoint; the scores are not). Two parts:

1. ``auto``: the calibration the worker runs at start-up (``precision.py``, the
   built-in calibration set, the worker's thread count), printed per candidate:
   pairs/s, speed-up over fp32, the largest score change from fp32 and the
   verdicts flipped at the threshold; then the pick and its speed-up.
2. long premises (``--pairs``, 0 skips): each precision one pair at a time and
   fp32 in length-sorted batches, on premises of ``--min-tokens`` to
   ``--max-tokens``, with the largest score difference from fp32.

The test tokenizer is ByT5 (one token per byte): the same text is 3-4 times as
many tokens as with flan-t5's SentencePiece, so every figure here is for
longer inputs than the real model would see.

    python tests/perf/bench_hhem.py                 # flan-t5-base size
    python tests/perf/bench_hhem.py --device cuda --batch-sizes 1 8 32 --pairs 64
    python tests/perf/bench_hhem.py --size tiny     # a quick check of the script
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

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
from detectors.faithfulness.precision import (  # noqa: E402
    calibrate,
    candidates_for,
    read_calibration_pairs,
)
from tests.hhem_checkpoint import FLAN_T5_BASE, TINY, build_checkpoint  # noqa: E402

WORDS = [
    *("refund", "policy", "order", "shipping", "customer", "invoice", "account", "payment"),
    *("delivery", "warranty", "product", "return", "days", "within", "request", "support"),
    *("contact", "address", "billing", "period", "free", "above", "euros", "store", "item"),
    *("package", "tracking", "number", "exchange", "credit", "card", "bank", "transfer"),
]


def make_pairs(count: int, min_tokens: int, max_tokens: int, seed: int) -> list[tuple[str, str]]:
    """Premises of min..max bytes (ByT5: one token per byte), evenly spread, shuffled."""
    rng = random.Random(seed)
    pairs = []
    for i in range(count):
        target = min_tokens + (max_tokens - min_tokens) * i // max(1, count - 1)
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < target:
            words.append(rng.choice(WORDS))
        premise = " ".join(words)[:target]
        hypothesis = " ".join(rng.choice(WORDS) for _ in range(12)) + "."
        pairs.append((premise, hypothesis))
    rng.shuffle(pairs)
    return pairs


def auto_part(fp32: HhemScorer, threshold: float, tolerance: float, batch_size: int) -> None:
    """Run the start-up calibration and print what it measured and chose."""
    pairs = read_calibration_pairs()
    lengths = sorted(len(fp32.prepare(p, h).input_ids) for p, h in pairs)
    print(
        f"\n1. precision: auto on the calibration set: {len(pairs)} pairs, "
        f"{lengths[0]}-{lengths[-1]} tokens, batch size {batch_size}, "
        f"threshold {threshold}, tolerance {tolerance}"
    )
    started = time.perf_counter()
    chosen, choice = calibrate(
        fp32, threshold=threshold, tolerance=tolerance, batch_size=batch_size
    )
    seconds = time.perf_counter() - started
    base = choice.measurements[0].pairs_per_second
    print(f"{'candidate':<16}{'pairs/s':>9}{'speed-up':>10}{'max change':>12}{'flips':>7}  ok")
    for m in choice.measurements:
        ok = m.max_change <= tolerance and m.flips == 0
        print(
            f"{m.precision:<16}{m.pairs_per_second:>9.3f}{m.pairs_per_second / base:>9.2f}x"
            f"{m.max_change:>12.4f}{m.flips:>7}  {'yes' if ok else 'no'}"
        )
    picked = next(m for m in choice.measurements if m.precision == choice.precision)
    print(
        f"auto picks {choice.precision}: {picked.pairs_per_second / base:.2f}x fp32 "
        f"(target >= 2x); calibration took {seconds:.0f} s"
    )
    fastest = max(choice.measurements, key=lambda m: m.pairs_per_second)
    if fastest.precision != choice.precision:
        print(
            f"fastest overall: {fastest.precision}, {fastest.pairs_per_second / base:.2f}x fp32, "
            f"max change {fastest.max_change:.4f}, {fastest.flips} flips"
        )
    del chosen


def timed(
    scorer: HhemScorer, prepared: list[PreparedPair], batch_size: int
) -> tuple[float, list[float]]:
    """Seconds and scores, after a warm-up on one pair (first-call allocations)."""
    scorer.score_prepared(prepared[:1])
    started = time.perf_counter()
    scores = scorer.score_batched(prepared, batch_size)
    return time.perf_counter() - started, scores


def long_part(fp32: HhemScorer, pairs: list[tuple[str, str]], batch_sizes: list[int]) -> None:
    """Each precision one at a time, fp32 in batches, on long premises."""
    prepared = [fp32.prepare(p, h) for p, h in pairs]
    lengths = sorted(len(p.input_ids) for p in prepared)
    tokens = sum(lengths)
    print(f"\n2. long premises: {len(pairs)} pairs, {lengths[0]}-{lengths[-1]} tokens each")
    print(f"{'setting':<28}{'pairs/s':>9}{'tokens/s':>10}{'speed-up':>10}{'max |diff|':>12}")
    runs: list[tuple[str, HhemScorer, int]] = [("fp32", fp32, 1)]
    runs += [("fp32", fp32, b) for b in batch_sizes if b != 1]
    precisions: tuple[Precision, ...] = candidates_for(fp32.device.type)
    runs += [(p, fp32.converted(p), 1) for p in precisions]
    baseline: tuple[float, list[float]] | None = None
    for name, scorer, batch_size in runs:
        seconds, scores = timed(scorer, prepared, batch_size)
        baseline = baseline or (seconds, scores)
        diff = max(abs(a - b) for a, b in zip(scores, baseline[1], strict=True))
        label = f"{name} {'one at a time' if batch_size == 1 else f'batches of {batch_size}'}"
        print(
            f"{label:<28}{len(prepared) / seconds:>9.3f}{tokens / seconds:>10.0f}"
            f"{baseline[0] / seconds:>9.2f}x{diff:>12.4f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["base", "tiny"], default="base")
    parser.add_argument("--pairs", type=int, default=4, help="long-premise pairs; 0 skips")
    parser.add_argument("--min-tokens", type=int, default=350)
    parser.add_argument("--max-tokens", type=int, default=1600)
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=[4])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="default: as the sidecar")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--tolerance", type=float, default=0.01)
    parser.add_argument("--skip-auto", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    threads = set_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        size = FLAN_T5_BASE if args.size == "base" else TINY
        started = time.perf_counter()
        directory, model = build_checkpoint(Path(tmp), size=size, seed=args.seed)
        del model
        checkpoint = read_checkpoint(str(directory))
        print(f"checkpoint ({args.size}) written in {time.perf_counter() - started:.1f} s")
        cpu = platform.processor() or platform.machine()
        print(
            f"torch {torch.__version__}, {threads} threads, device {args.device}, "
            f"cpu capability {torch.backends.cpu.get_cpu_capability()} ({cpu})"
        )
        fp32 = HhemScorer(checkpoint, device=args.device)
        batch_size = 1 if args.device == "cpu" else 8  # the worker's default
        if not args.skip_auto:
            auto_part(fp32, args.threshold, args.tolerance, batch_size)
        if args.pairs:
            pairs = make_pairs(args.pairs, args.min_tokens, args.max_tokens, args.seed)
            long_part(fp32, pairs, args.batch_sizes)


if __name__ == "__main__":
    main()

"""HHEM scoring speed: fp32 one pair at a time, padded batches, bf16 and int8, same inputs.

A flan-t5-base-sized T5ForTokenClassification with random weights is written in
the published HHEM layout and loaded through the sidecar's own loader (so the
cost is that of the real checkpoint; the scores are not). Prints pairs/s,
tokens/s, the speed-up over fp32 one-at-a-time and the largest score
difference from fp32 for each setting, then the issue's targets.

    python tests/perf/bench_hhem.py                 # flan-t5-base size, 6 pairs
    python tests/perf/bench_hhem.py --device cuda --batch-sizes 8 16 32 --pairs 64
    python tests/perf/bench_hhem.py --size tiny     # a quick check of the script
"""

from __future__ import annotations

import argparse
import platform
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from detectors.faithfulness.hhem import HhemScorer, PreparedPair, read_checkpoint  # noqa: E402
from detectors.faithfulness.worker import length_batches  # noqa: E402
from tests.hhem_checkpoint import FLAN_T5_BASE, TINY, build_checkpoint  # noqa: E402

WORDS = [
    *("refund", "policy", "order", "shipping", "customer", "invoice", "account", "payment"),
    *("delivery", "warranty", "product", "return", "days", "within", "request", "support"),
    *("contact", "address", "billing", "period", "free", "above", "euros", "store", "item"),
    *("package", "tracking", "number", "exchange", "credit", "card", "bank", "transfer"),
]


@dataclass
class Result:
    name: str
    seconds: float
    pairs: int
    tokens: int
    scores: list[float]


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


def run(name: str, scorer: HhemScorer, prepared: list[PreparedPair], batch_size: int) -> Result:
    scorer.score_prepared(prepared[:1])  # warm-up: first-call allocations are not scoring
    scores = [0.0] * len(prepared)
    started = time.perf_counter()
    for indices in length_batches(prepared, batch_size, max_padding_share=1.0):
        for index, score in zip(
            indices, scorer.score_prepared([prepared[i] for i in indices]), strict=True
        ):
            scores[index] = score
    seconds = time.perf_counter() - started
    tokens = sum(len(p.input_ids) for p in prepared)
    return Result(name, seconds, len(prepared), tokens, scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=["base", "tiny"], default="base")
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--min-tokens", type=int, default=350)
    parser.add_argument("--max-tokens", type=int, default=1600)
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=[4])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        size = FLAN_T5_BASE if args.size == "base" else TINY
        started = time.perf_counter()
        directory, model = build_checkpoint(Path(tmp), size=size, seed=args.seed)
        del model
        checkpoint = read_checkpoint(str(directory))
        print(f"checkpoint ({args.size}) written in {time.perf_counter() - started:.1f} s")
        pairs = make_pairs(args.pairs, args.min_tokens, args.max_tokens, args.seed)
        cpu = platform.processor() or platform.machine()
        print(
            f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, "
            f"cpu capability {torch.backends.cpu.get_cpu_capability()} ({cpu})"
        )
        results: list[Result] = []
        precisions = ["fp32", "bf16"] + (["int8"] if args.device == "cpu" else [])
        for precision in precisions:
            scorer = HhemScorer(checkpoint, device=args.device, precision=precision)  # type: ignore[arg-type]
            prepared = [scorer.prepare(p, h) for p, h in pairs]
            results.append(run(f"{precision} one at a time", scorer, prepared, 1))
            if precision == "fp32" or args.device != "cpu":
                for batch_size in args.batch_sizes:
                    results.append(
                        run(f"{precision} batches of {batch_size}", scorer, prepared, batch_size)
                    )
            del scorer

    lengths = sorted(len(p.input_ids) for p in prepared)
    print(f"{len(pairs)} pairs, {lengths[0]}-{lengths[-1]} tokens each (premise + prompt + answer)")
    baseline = results[0]
    print(f"{'setting':<24}{'pairs/s':>9}{'tokens/s':>10}{'speed-up':>10}{'max |diff|':>12}")
    for result in results:
        diff = max(abs(a - b) for a, b in zip(result.scores, baseline.scores, strict=True))
        print(
            f"{result.name:<24}{result.pairs / result.seconds:>9.3f}"
            f"{result.tokens / result.seconds:>10.0f}"
            f"{baseline.seconds / result.seconds:>9.2f}x{diff:>12.4f}"
        )
    close = [
        r
        for r in results[1:]
        if max(abs(a - b) for a, b in zip(r.scores, baseline.scores, strict=True)) <= 0.01
    ]
    best = min(close, key=lambda r: r.seconds, default=baseline)
    print(
        f"best setting within 0.01 of fp32: {best.name}, "
        f"{baseline.seconds / best.seconds:.2f}x fp32 one at a time (target >= 1.6x)"
    )
    batched = [r for r in results if "batches" in r.name and r.name.startswith("fp32")]
    for result in batched:
        print(
            f"{result.name}: {baseline.seconds / result.seconds:.2f}x one at a time "
            "(design target on a GPU: >= 3x)"
        )


if __name__ == "__main__":
    main()

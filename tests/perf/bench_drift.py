"""Benchmark: one MMD drift test, 1000 reference x 1000 current 384-d vectors, 100 permutations.

The scipy backend against alibi-detect's MMDDrift (pytorch, CPU) on the same
data, in one run. Each side is timed as "setup" (bandwidth and reference
kernel from the reference) plus "test" (one window), best of ``--repeat``;
the statistic of both is printed to show they compute the same MMD^2.
alibi-detect is timed on float32 (its usual input) and float64 (what the
detector's alibi backend passes, for agreement with scipy).
Prints JSON. Run: python tests/perf/bench_drift.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def best_of(repeat: int, work: Callable[[], Any]) -> tuple[float, Any]:
    best, value = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        value = work()
        best = min(best, time.perf_counter() - start)
    return best, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--permutations", type=int, default=100)
    args = parser.parse_args()

    import torch
    from alibi_detect.cd import MMDDrift

    from detectors.drift.scipy_backend import ScipyMmd

    rng = np.random.default_rng(0)
    reference = rng.normal(size=(args.n, args.dim))
    current = rng.normal(loc=0.05, size=(args.n, args.dim))
    results: dict[str, Any] = {
        "n_reference": args.n,
        "n_current": args.n,
        "dim": args.dim,
        "permutations": args.permutations,
        "torch_threads": torch.get_num_threads(),
    }

    def scipy_full() -> Any:
        return ScipyMmd(reference, 0.05, args.permutations, seed=1).test(current)

    scipy_backend = ScipyMmd(reference, 0.05, args.permutations, seed=1)
    total, scipy_result = best_of(args.repeat, scipy_full)
    test_only, _ = best_of(args.repeat, lambda: scipy_backend.test(current))
    results["scipy"] = {
        "setup_plus_test_s": round(total, 4),
        "test_s": round(test_only, 4),
        "statistic": scipy_result.statistic,
        "p_value": scipy_result.p_value,
    }

    for dtype in (np.float32, np.float64):
        ref, cur = reference.astype(dtype), current.astype(dtype)

        def alibi_full(ref: np.ndarray = ref, cur: np.ndarray = cur) -> Any:
            detector = MMDDrift(
                ref, backend="pytorch", p_val=0.05, n_permutations=args.permutations
            )
            return detector.predict(cur)["data"]

        detector = MMDDrift(ref, backend="pytorch", p_val=0.05, n_permutations=args.permutations)
        total, data = best_of(args.repeat, alibi_full)
        test_only, _ = best_of(args.repeat, lambda d=detector, c=cur: d.predict(c))
        results[f"alibi_{np.dtype(dtype).name}"] = {
            "setup_plus_test_s": round(total, 4),
            "test_s": round(test_only, 4),
            "statistic": float(data["distance"]),
            "p_value": float(data["p_val"]),
        }

    alibi = results["alibi_float32"]
    results["speedup_setup_plus_test_vs_alibi_float32"] = round(
        alibi["setup_plus_test_s"] / results["scipy"]["setup_plus_test_s"], 1
    )
    results["speedup_test_vs_alibi_float32"] = round(
        alibi["test_s"] / results["scipy"]["test_s"], 1
    )
    results["statistic_relative_difference_vs_alibi_float64"] = abs(
        results["scipy"]["statistic"] - results["alibi_float64"]["statistic"]
    ) / abs(results["alibi_float64"]["statistic"])
    results["target_met"] = (
        results["scipy"]["setup_plus_test_s"] <= 0.1 * alibi["setup_plus_test_s"]
    )
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

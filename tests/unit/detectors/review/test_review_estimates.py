"""One corrected pass share three ways: ``report review`` (from the store), the generated
recording rules in promtool (from the counters the same verdicts moved) and the Python
estimator agree."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from alerts.rules import RULE_FILE, render_rules
from detectors.review.calibration import DEFAULT_JUDGE
from detectors.review.config import ReviewConfig
from detectors.review.detector import ReviewDetector
from detectors.review.estimates import (
    faithfulness_row,
    judged_counts,
    pass_shares,
    random_pairs,
)
from detectors.review.model import ReviewItem, Stratum, Verdict
from detectors.review.report import build_report, render_markdown
from monitor.contract.config import Config
from monitor.contract.rulekit.prediction_powered import ReviewedPairs, corrected
from monitor.contract.sidecar_registry import SidecarRegistry
from tests.unit.alerts.test_rules import tool

JOB = "rag-monitor"
HOUR_S = 3600.0
REVIEW_HOURS = 28 * 24  # guardrails.review_correction.window, the default
JUDGED, PASSED = 600, 540  # answers the judge scored in the last 6h, and passed


def _reviewed(seed: int) -> list[tuple[ReviewItem, Verdict]]:
    """Random and oversampled items with verdicts: a judge that passes 10% of unsupported
    answers and fails 4% of supported ones, and people who find 80% supported."""
    rng = np.random.default_rng(seed)
    reviewed = []
    for i in range(180):
        supported = bool(rng.random() < 0.8)
        passes = bool(rng.random() >= 0.04) if supported else bool(rng.random() < 0.10)
        strata: tuple[Stratum, ...] = ("random",) if i < 150 else ("thumbs_down",)
        item = ReviewItem(
            f"{i:032x}", 1.0, "q", "a", strata=strata,
            hhem_score=0.9 if passes else 0.1, hhem_threshold=0.5,
        )  # fmt: skip
        human = "yes" if supported else ("no" if i % 2 else "partly")
        reviewed.append((item, Verdict(item.trace_id, human, reviewed_at=HOUR_S)))
    return reviewed


def _counters(reviewed: list[tuple[ReviewItem, Verdict]], tmp_path: Path) -> dict[str, float]:
    """The agreement counters after the review detector recorded every verdict."""
    registry = SidecarRegistry()
    config = ReviewConfig.model_validate({"enabled": True, "http": {"enabled": False}})
    detector = ReviewDetector(config, registry, tmp_path)
    for item, verdict in reviewed:
        detector.on_verdict(item, verdict)
    return {
        "rag_review_judge_agreement_total{"
        + ", ".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
        + "}": s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "rag_review_judge_agreement_total"
    }


def _promtool_corrected(replicas: list[dict[str, float]], tmp_path: Path) -> float:
    """``rag:faithfulness_pass:corrected_ratio6h`` that Prometheus's rule engine records
    from the replicas' counters (verdicts an hour in, the judge's answers over the last
    6h, all on the first replica, as a scorer tier would export them)."""
    series = [
        {
            "series": name.replace("{", f'{{job="{JOB}", instance="{replica}:9464", '),
            "values": f"0 {value:g}x{REVIEW_HOURS}",
        }
        for replica, counters in enumerate(replicas)
        for name, value in counters.items()
    ]
    labels = f'job="{JOB}", instance="0:9464", judge="{DEFAULT_JUDGE}"'
    # nothing judged until 5h before the evaluation, at the end of the review window (no
    # sample at a window's edge is extrapolated past: the increases are the counts)
    quiet = f"0x{REVIEW_HOURS - 6}"
    scored = (
        f'rag_faithfulness_evaluations_total{{{labels}, outcome="scored", variant="production"}}'
    )
    below = f'rag_faithfulness_below_threshold_total{{{labels}, variant="production"}}'
    series += [
        {"series": f"rag_faithfulness_judge_info{{{labels}}}", "values": f"1x{REVIEW_HOURS}"},
        {"series": scored, "values": f"{quiet} 0+{JUDGED / 5:g}x5"},
        {"series": below, "values": f"{quiet} 0+{(JUDGED - PASSED) / 5:g}x5"},
    ]
    (tmp_path / RULE_FILE).write_text(render_rules(Config()))
    record = "rag:faithfulness_pass:corrected_ratio6h"
    # promtool prints the value it got when the expected one differs: ask for -1
    test = {
        "rule_files": [RULE_FILE],
        "evaluation_interval": "1d",  # the recordings read here do not depend on it
        "tests": [
            {
                "interval": "1h",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": record,
                        "eval_time": f"{REVIEW_HOURS}h",
                        "exp_samples": [
                            {
                                "labels": f'{record}{{job="{JOB}", judge="{DEFAULT_JUDGE}"}}',
                                "value": -1,
                            }
                        ],
                    }
                ],
            }
        ],
    }
    (tmp_path / "three_ways.yaml").write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [tool("promtool"), "test", "rules", "three_ways.yaml"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    got = re.search(r"got: \{[^}]*\} ([-\d.E+]+)", result.stdout + result.stderr)
    assert got is not None, result.stdout + result.stderr
    return float(got[1])


def _report_corrected(reviewed: list[tuple[ReviewItem, Verdict]]) -> str:
    """The corrected cell of the report's faithfulness row, the judged counts read from
    the recordings as ``--prometheus`` reads them."""
    recordings = {
        "rag:faithfulness_scored:increase6h": float(JUDGED),
        "rag:faithfulness_pass:ratio_rate6h": PASSED / JUDGED,
    }
    judged = judged_counts(
        lambda query: (
            [({"job": JOB, "judge": DEFAULT_JUDGE}, recordings[query])]
            if query in recordings
            else []
        ),
        "6h",
        JOB,
    )
    shares = pass_shares(random_pairs(reviewed, since=0.0), judged)
    text = render_markdown(build_report(reviewed, shares=shares, windows=("6h", "28d")))
    row = next(
        line
        for line in text.splitlines()
        if line.startswith(f"| {faithfulness_row(DEFAULT_JUDGE)} |")
    )
    return row.split("|")[6].strip()


@pytest.mark.parametrize("seed", [3])
def test_report_rules_and_estimator_give_one_corrected_share(seed: int, tmp_path: Path) -> None:
    """The same verdicts and judged answers give one corrected pass share in the report,
    in the recording rules (promtool, series from the counters of two replicas, each of
    whose pages recorded half the verdicts) and in the estimator."""
    reviewed = _reviewed(seed)
    random = [(i, v) for i, v in reviewed if "random" in i.strata]
    pairs = ReviewedPairs.of(
        [((i.hhem_score or 0) >= 0.5, v.supported == "yes") for i, v in random]
    )
    assert pairs.n == 150  # the oversampled items are left out
    estimate = corrected(JUDGED, PASSED, pairs)
    replicas = [
        _counters(reviewed[0::2], tmp_path / "a"),
        _counters(reviewed[1::2], tmp_path / "b"),
    ]
    assert _promtool_corrected(replicas, tmp_path) == pytest.approx(estimate.share, abs=1e-9)
    assert _report_corrected(reviewed).startswith(f"{estimate.share:.1%} [")

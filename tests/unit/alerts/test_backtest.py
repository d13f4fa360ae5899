"""The backtest's own logic: ``for`` replay, rule layers, the synthetic world, chunking."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.typing import NDArray

from alerts.backtest import episodes, firing_steps, raw_names, recording_layers
from alerts.backtest_command import parse_incident
from alerts.scratch import BacktestError, block_duration, chunks, find_tools
from alerts.simulate import simulate
from detectors.evaluations import names as evaluations
from detectors.latency.simulate import HEALTHY_P95_S
from monitor.contract.buckets import LATENCY_BUCKETS
from monitor.contract.config import Config
from monitor.contract.names import EVALUATION_AGREEMENT_TOTAL, FIELDS_TOTAL, JUDGE_AGREEMENT_TOTAL
from monitor.contract.rulekit.prediction_powered import ReviewedPairs, judge_bias
from monitor.contract.rulekit.simulation import (
    JUDGE_BIAS,
    JUDGE_FALSE_PASS,
    REVIEWS_PER_WEEK,
    TROUGH_SHARE,
    Samples,
    World,
    diurnal_expected,
)
from monitor.runtime.cli import main

DAY_S = 86_400


def world(**overrides: object) -> World:
    settings: dict[str, object] = {"requests_per_day": 272_000, "duration_s": 2 * DAY_S, "seed": 7}
    return World(**{**settings, **overrides})  # type: ignore[arg-type]


def run(
    simulated: World, detectors: dict[str, object] | None = None, fields: tuple[str, ...] = ()
) -> Samples:
    """The world's samples with the detectors configured as ``detectors`` says (the
    faithfulness sampler without its hourly floor unless it says otherwise)."""
    sections = {"faithfulness": {"min_scored_per_hour": 0}, **(detectors or {})}
    return simulate(simulated, Config.model_validate({"detectors": sections}), fields)


def counter(world_samples: object, name: str, **labels: str) -> NDArray[np.float64]:
    for series_name, series_labels, values in world_samples.series:  # type: ignore[attr-defined]
        if series_name == name and labels.items() <= series_labels.items():
            return values  # type: ignore[no-any-return]
    raise AssertionError(f"no series {name} {labels}")


@pytest.mark.parametrize(
    ("present", "for_steps", "expected"),
    [
        ([1, 1, 1], 0, [1, 1, 1]),
        ([1, 1, 1, 1], 2, [0, 0, 1, 1]),
        ([1, 1, 0, 1, 1, 1], 2, [0, 0, 0, 0, 0, 1]),
        ([0, 1, 1, 1, 0, 1], 1, [0, 0, 1, 1, 0, 0]),
    ],
    ids=["for-0-fires-at-once", "fires-after-for", "gap-resets-pending", "resolves-on-gap"],
)
def test_firing_steps_replay_for(present: list[int], for_steps: int, expected: list[int]) -> None:
    """An alert fires once its condition held at this evaluation and the ``for`` before it."""
    fired = firing_steps(np.array(present, dtype=bool), for_steps)
    assert fired.astype(int).tolist() == expected


def test_episodes_are_runs_of_firing() -> None:
    """Episodes are maximal runs of firing evaluations: where each starts and its length."""
    firing = np.array([1, 1, 0, 0, 1, 0, 1, 1, 1], dtype=bool)
    assert episodes(firing) == [(0, 2), (4, 1), (6, 3)]


def test_recording_layers_follow_dependencies() -> None:
    """A rule reading a recorded series lands one layer after the rule recording it; a
    series no alert reads is not backfilled."""
    document = {
        "groups": [
            {
                "name": "r",
                "rules": [
                    {"record": "a:avg", "expr": "avg_over_time(a:ratio[7d])"},
                    {"record": "a:ratio", "expr": "sum(rate(x_total[5m]))"},
                    {"record": "a:band", "expr": "a:avg + 3 * a:ratio_extra"},
                    {"record": "a:ratio_extra", "expr": "sum(rate(y_total[5m]))"},
                    {"record": "a:panel_only", "expr": "sum(rate(z_total[5m]))"},
                ],
            },
            {"name": "alerts", "rules": [{"alert": "A", "expr": "a:band > 1"}]},
        ]
    }
    layers = [[rule["record"] for rule in layer] for layer in recording_layers(document)]
    assert layers == [["a:ratio", "a:ratio_extra"], ["a:avg"], ["a:band"]]


def test_recording_layers_refuse_a_cycle() -> None:
    """Rules that read each other cannot be backfilled and say so."""
    rules = [{"record": "a:x", "expr": "a:y + 1"}, {"record": "a:y", "expr": "a:x + 1"}]
    alert = {"alert": "X", "expr": "a:x > 1"}
    with pytest.raises(BacktestError, match="cycle"):
        recording_layers({"groups": [{"name": "r", "rules": [*rules, alert]}]})


def test_raw_names_skip_recorded_series_strings_and_functions() -> None:
    """Names in label values, recorded series and function calls are not raw metrics."""
    expr = 'sum by (job) (rate(x_total{kind="y_total"}[5m])) / a:recorded + absent(up)'
    names = raw_names({"groups": [{"name": "g", "rules": [{"alert": "A", "expr": expr}]}]})
    assert "x_total" in names
    assert "up" in names
    assert not {"y_total", "a:recorded", "rate", "by", "absent"} & names


def test_diurnal_traffic_has_its_trough_peak_and_daily_total() -> None:
    """Expected traffic: a night trough a twentieth of the day peak; a day sums to the volume."""
    expected = diurnal_expected(world(), np.arange(1440, dtype=np.int64))
    assert expected.min() / expected.max() == pytest.approx(TROUGH_SHARE, rel=1e-3)
    assert int(np.argmin(expected)) == 120  # 02:00 UTC
    assert int(np.argmax(expected)) == 840  # 14:00 UTC
    assert expected.sum() == pytest.approx(272_000, rel=1e-6)


def test_healthy_world_shows_its_true_rates() -> None:
    """Seeded counters recover the true rates: regeneration, faithful share, p95 bucket."""
    samples = run(world())
    requests = counter(samples, "rag_requests_total")[-1]
    assert requests == pytest.approx(2 * 272_000, rel=0.01)
    regenerations = counter(samples, "rag_feedback_events_total", kind="regenerate")[-1]
    assert regenerations / requests == pytest.approx(0.05, abs=0.002)
    scored = counter(samples, "rag_faithfulness_evaluations_total", outcome="scored")[-1]
    below = counter(samples, "rag_faithfulness_below_threshold_total")[-1]
    assert scored / requests == pytest.approx(0.02, abs=0.001)
    assert 1 - below / scored == pytest.approx(0.92, abs=0.01)
    total = counter(samples, "rag_stage_latency_seconds_count", stage="total")[-1]
    share = {
        le: counter(samples, "rag_stage_latency_seconds_bucket", stage="total", le=repr(le))[-1]
        / total
        for le in LATENCY_BUCKETS
    }
    assert share[1.0] < 0.95 < share[1.5]  # p95 1.2 s lies in the (1.0, 1.5] bucket
    assert HEALTHY_P95_S == 1.2


def test_incident_changes_only_its_window() -> None:
    """An incident doubles regeneration during its hours and not outside them."""
    incident = parse_incident("regeneration:1d14h:2h")
    samples = run(world(incidents=[incident], requests_per_day=1_800_000))
    requests = np.diff(counter(samples, "rag_requests_total"), prepend=0)
    regenerations = np.diff(counter(samples, "rag_feedback_events_total"), prepend=0)
    during = slice(1440 + 14 * 60, 1440 + 16 * 60)
    assert regenerations[during].sum() / requests[during].sum() == pytest.approx(0.10, abs=0.01)
    before = slice(0, 1440 + 14 * 60)
    assert regenerations[before].sum() / requests[before].sum() == pytest.approx(0.05, abs=0.003)


def test_sampler_floor_and_capacity() -> None:
    """The hourly floor raises night sampling; the capacity caps every minute."""
    night = slice(1440 + 60, 1440 + 4 * 60)  # 01:00-04:00 on the second day
    floored = run(world(requests_per_day=45_000), {"faithfulness": {"min_scored_per_hour": 120}})
    scored = np.diff(counter(floored, "rag_faithfulness_evaluations_total"), prepend=0)
    assert scored[night].sum() / 3 >= 100  # ~120 an hour where 2% gives ~5
    capped = run(world(), {"faithfulness": {"sample_rate": 1.0, "max_per_second": 1.0}})
    assert np.diff(counter(capped, "rag_faithfulness_evaluations_total")).max() <= 60


def test_same_seed_same_world() -> None:
    """A world is the same on every run of the same seed."""
    first, second = run(world()), run(world())
    assert all(np.array_equal(a[2], b[2]) for a, b in zip(first.series, second.series, strict=True))


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ("latency:1d", "kind:start:duration"),
        ("outage:1d:1h", "unknown kind 'outage'"),
        ("latency:one day:1h", "not a duration"),
    ],
    ids=["missing-part", "unknown-kind", "bad-duration"],
)
def test_incident_spec_errors_say_what_to_write(spec: str, error: str) -> None:
    """A wrong --incident names what is wrong."""
    with pytest.raises(ValueError, match=error):
        parse_incident(spec)


def test_unknown_incident_lists_the_kinds_the_detectors_react_to() -> None:
    """The kinds come from the registered detectors' components, then the core's coverage."""
    kinds = (
        "latency, regeneration, faithfulness, faithfulness_intent, judge_blind, judge_change, "
        "evaluation, "
        "false_exclusion, "
        "coverage, all"
    )
    with pytest.raises(ValueError, match=f"one of {kinds}"):
        parse_incident("outage:1d:1h")


def test_incident_all_is_every_kind() -> None:
    """``all`` degrades every rate at once; a judge change is no degradation and is named
    alone."""
    assert set(parse_incident("all:8d14h:6h").kinds) == {
        "faithfulness",
        "faithfulness_intent",
        "judge_blind",
        "regeneration",
        "false_exclusion",
        "latency",
        "coverage",
        "evaluation",
    }
    assert parse_incident("judge_change:1d:2d").kinds == ("judge_change",)


def test_evaluation_incident_drops_the_pass_share_of_a_sampled_evaluation() -> None:
    """answer_relevancy at 2% of the requests: about 98% of the judged pass at a mean score
    of 0.9 (threshold 0.7, sd 0.1), about 16% during an evaluation incident (mean 0.6);
    1% of the judged are errors, and the judged are about 2% of the requests."""
    evaluation = {"answer_relevancy": {"score_min": 0.7, "sample_rate": 0.02}}
    samples = run(world(incidents=[parse_incident("evaluation:1d:1d")]),
                  {"evaluations": {"evaluations": evaluation}})  # fmt: skip
    requests = np.diff(counter(samples, "rag_requests_total"), prepend=0)

    def results(outcome: str) -> NDArray[np.float64]:
        name = evaluations.RESULTS_TOTAL
        return np.diff(counter(samples, name, evaluation="answer_relevancy", outcome=outcome),
                       prepend=0)  # fmt: skip

    passed, failed, errors = results("pass"), results("fail"), results("error")
    before, during = slice(0, 1440), slice(1440, 2880)
    judged = passed + failed + errors
    assert judged.sum() / requests.sum() == pytest.approx(0.02, abs=0.002)
    assert errors.sum() / judged.sum() == pytest.approx(0.01, abs=0.004)

    def pass_share(part: slice) -> float:
        return float(passed[part].sum() / (passed[part].sum() + failed[part].sum()))

    assert pass_share(before) == pytest.approx(0.977, abs=0.01)
    assert pass_share(during) == pytest.approx(0.159, abs=0.03)


def reviewed_pairs(samples: Samples, name: str, judge: str, **labels: str) -> ReviewedPairs:
    """The random reviews of the whole world, by the judge's verdict (label ``judge``:
    its pass value first) and the reviewer's."""
    verdicts = {"hhem": ("supported", "unsupported"), "outcome": ("pass", "fail")}[judge]
    cells = [
        int(
            counter(samples, name, stratum="random", **{judge: verdict, "human": human}, **labels)[
                -1
            ]
        )
        for verdict in verdicts
        for human in ("yes", "no")
    ]
    return ReviewedPairs(*cells)


def test_judges_are_reviewed_at_random_and_read_the_worlds_bias_high() -> None:
    """The world's random reviews a week of the faithfulness judge, and of an evaluation
    set compare_with_review (none of one that is not): the judge's pass share, on the
    reviewed items and on all it scored, reads the world's judge_bias above the people's,
    and it passes about 6 in 10 of the answers they fail."""
    evaluation = {
        "groundedness": {"score_min": 0.7, "compare_with_review": True},
        "answer_relevancy": {"score_min": 0.7},
    }
    simulated = world(duration_s=28 * DAY_S, reviews_per_week=1000, judge_bias=0.03)
    samples = run(simulated, {"evaluations": {"evaluations": evaluation}})
    faithfulness = reviewed_pairs(samples, JUDGE_AGREEMENT_TOTAL, "hhem")
    assert faithfulness.n / 4 == pytest.approx(1000, rel=0.05)
    assert faithfulness.human_share == pytest.approx(0.92, abs=0.015)
    bias = judge_bias(faithfulness)
    assert abs(bias.share - 0.03) < 3 * bias.stderr
    failed = faithfulness.judge_pass_human_fail + faithfulness.both_fail
    assert faithfulness.judge_pass_human_fail / failed == pytest.approx(
        JUDGE_FALSE_PASS + 0.03 / 2 / 0.08, abs=0.1
    )
    scored = counter(samples, "rag_faithfulness_evaluations_total", outcome="scored")[-1]
    below = counter(samples, "rag_faithfulness_below_threshold_total")[-1]
    assert 1 - below / scored == pytest.approx(0.95, abs=0.003)
    compared = reviewed_pairs(
        samples, EVALUATION_AGREEMENT_TOTAL, "outcome", evaluation="groundedness"
    )
    assert compared.n / 4 == pytest.approx(1000, rel=0.05)
    assert compared.human_share == pytest.approx(0.977 - 0.03, abs=0.01)
    assert abs(judge_bias(compared).share - 0.03) < 3 * judge_bias(compared).stderr
    with pytest.raises(AssertionError, match="no series"):
        counter(samples, EVALUATION_AGREEMENT_TOTAL, evaluation="answer_relevancy")


def test_the_defaults_review_fifty_a_week_of_an_honest_judge() -> None:
    """Without settings, the world has 50 random reviews a week and a judge without bias."""
    assert (REVIEWS_PER_WEEK, JUDGE_BIAS) == (50, 0)
    samples = run(world(duration_s=28 * DAY_S))
    pairs = reviewed_pairs(samples, JUDGE_AGREEMENT_TOTAL, "hhem")
    assert pairs.n == pytest.approx(200, rel=0.2)
    assert abs(judge_bias(pairs).share) < 3 * judge_bias(pairs).stderr


def test_a_judge_blind_incident_fails_answers_only_the_reviewers_see() -> None:
    """During judge_blind, people find 0.75 of the answers faithful while the judge passes
    as many as before (0.94, reading 2 points high); outside it the reviewers see 0.92."""
    incident = parse_incident("judge_blind:2d:14d")
    simulated = world(
        duration_s=16 * DAY_S, reviews_per_week=2000, judge_bias=0.02, incidents=[incident]
    )
    samples = run(simulated)

    def per_minute(name: str, **labels: str) -> NDArray[np.float64]:
        return np.diff(counter(samples, name, **labels), prepend=0)

    scored = per_minute("rag_faithfulness_evaluations_total", outcome="scored")
    below = per_minute("rag_faithfulness_below_threshold_total")
    during, before = slice(2 * 1440, None), slice(0, 2 * 1440)
    assert 1 - below[during].sum() / scored[during].sum() == pytest.approx(0.94, abs=0.003)
    assert 1 - below[before].sum() / scored[before].sum() == pytest.approx(0.94, abs=0.005)
    cells = {
        (judge, human): per_minute(JUDGE_AGREEMENT_TOTAL, stratum="random", hhem=judge, human=human)
        for judge in ("supported", "unsupported")
        for human in ("yes", "no")
    }
    for part, truth in ((during, 0.75), (before, 0.92)):
        yes = sum(cells[(judge, "yes")][part].sum() for judge in ("supported", "unsupported"))
        total = sum(counts[part].sum() for counts in cells.values())
        assert yes / total == pytest.approx(truth, abs=0.03)


def test_coverage_incident_leaves_requests_without_contexts() -> None:
    """A coverage incident: every request of its hours lacks contexts, 1% before; the
    other watched fields stay at 1% and present + missing add up to the requests."""
    incident = parse_incident("coverage:1d14h:2h")
    samples = run(world(incidents=[incident]), fields=("answer", "contexts"))
    requests = np.diff(counter(samples, "rag_requests_total"), prepend=0)

    def missing(field: str) -> NDArray[np.float64]:
        return np.diff(counter(samples, FIELDS_TOTAL, field=field, present="false"), prepend=0)

    present = np.diff(counter(samples, FIELDS_TOTAL, field="contexts", present="true"), prepend=0)
    during, before = slice(1440 + 14 * 60, 1440 + 16 * 60), slice(0, 1440 + 14 * 60)
    assert (missing("contexts")[during] == requests[during]).all()
    assert missing("contexts")[before].sum() / requests[before].sum() == pytest.approx(
        0.01, abs=0.002
    )
    assert missing("answer")[during].sum() / requests[during].sum() == pytest.approx(
        0.01, abs=0.005
    )
    assert (missing("contexts") + present == requests).all()


def test_chunks_cover_the_range_under_the_points_limit() -> None:
    """query_range chunks cover every evaluation once, each under 11,000 points."""
    parts = list(chunks(0, 60 * 30_000, 60))
    assert parts[0][0] == 0
    assert parts[-1][1] == 60 * 30_000
    assert all(b[0] == a[1] + 60 for a, b in itertools.pairwise(parts))
    assert all((last - first) / 60 + 1 <= 11_000 for first, last in parts)


@pytest.mark.parametrize(("step", "block"), [(60, "162h"), (15, "18h"), (1, "2h")])
def test_block_duration_fits_one_query(step: float, block: str) -> None:
    """Backfill blocks are as long as one query_range of evaluations allows."""
    assert block_duration(step) == block


@pytest.mark.usefixtures("restored_logging")  # main() configures logging
def test_missing_prometheus_is_refused_clearly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without promtool and prometheus on PATH the command exits 2 and says what to install."""
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BacktestError, match="promtool and prometheus not found"):
        find_tools()
    assert main(["rules", "backtest", "--simulate", "--evaluate", "1h", "--warm-up", "1h"]) == 2
    assert "apt install prometheus" in capsys.readouterr().err


@pytest.mark.usefixtures("restored_logging")  # main() configures logging
def test_incident_outside_the_counted_days_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """An incident in the warm-up or after the world's end would measure nothing: refused."""
    arguments = ["rules", "backtest", "--simulate", "--evaluate", "1d"]
    assert main([*arguments, "--incident", "latency:8d14h:1h"]) == 2
    assert "outside the counted part" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv",
    [
        ["rules", "--config", "mine.yaml", "backtest", "--simulate"],
        ["rules", "backtest", "--config", "mine.yaml", "--simulate"],
    ],
    ids=["config-before-backtest", "config-after-backtest"],
)
def test_config_applies_wherever_it_is_given(argv: list[str]) -> None:
    """``--config`` reaches the backtest before or after the word ``backtest``."""
    from monitor.runtime.cli import build_parser

    assert str(build_parser().parse_args(argv).config) == "mine.yaml"


@pytest.mark.usefixtures("restored_logging")  # main() configures logging
def test_plain_rules_still_prints_the_rules(capsys: pytest.CaptureFixture[str]) -> None:
    """``rag-monitor rules`` without an action prints the rule file as before."""
    assert main(["rules"]) == 0
    assert capsys.readouterr().out.startswith("# Generated by `rag-monitor rules`")

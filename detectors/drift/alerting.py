"""The drift detector's rules and panels: the MMD test's verdict, p-value and statistic
per signal; the significance level is ``detectors.drift.p_value``.

The result gauges are absent until the first test, and the p-value stays absent
in online mode: the alert needs only the verdict, and quotes the p-value when
there is one. A change of the query embedding model (representation) is a ticket of
its own, never a drift verdict, and an annotation on the dashboard.
"""

from __future__ import annotations

from pathlib import Path

from detectors.drift.config import DriftConfig
from detectors.drift.names import (
    DETECTED,
    LAST_TEST,
    MMD_STATISTIC,
    P_VALUE,
    REFERENCE_FILL,
    REPRESENTATION_CHANGES,
    REPRESENTATION_INFO,
    REPRESENTATION_SHARE,
)
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.rulekit.fragments import Annotation, Panel, Row, RuleFragment
from monitor.contract.rulekit.promql import JOB, alert

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]
CHANGE_WINDOW = "1h"  # the ticket stays open this long after the last change
# A representation marks the first 10 minutes its info series exists (as releases do).
_CHANGE_MARK = "10m"


def rules(config: DriftConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    """The alert on a drift verdict. Its value is the p-value of the flagged test, or 1 in
    online mode (no p-value); a flagged p-value is below 1, so the description quotes it then."""
    drifted = alert(
        guardrails,
        "RagQueryDriftDetected",
        f"{P_VALUE}\nand on (job, instance, signal)\n{DETECTED} == 1\nor\n{DETECTED} == 1",
        severity="ticket",
        summary="Query embeddings drifted from the reference window ({{ $labels.job }})",
        description="The MMD two-sample test on {{ $labels.signal }} rejects 'same "
        "distribution'{{ if lt $value 1.0 }} (p = "
        '{{ $value | printf "%.3g" }}){{ end }} on {{ $labels.instance }}.',
    )
    changed = alert(
        guardrails,
        "RagEmbeddingModelChanged",
        # increase() misses a change counted before the first scrape of a new instance (a
        # sidecar restarted with the application): a new series already above 0 is one too.
        f"max by (job) (increase({REPRESENTATION_CHANGES}[{CHANGE_WINDOW}])) > 0\nor\n"
        f"max by (job) ({REPRESENTATION_CHANGES} > 0 unless {REPRESENTATION_CHANGES}"
        f" offset {CHANGE_WINDOW})",
        severity="ticket",
        summary="The query embedding model changed ({{ $labels.job }})",
        description="A new representation (embedding model) of the query vectors appeared in "
        f"the last {CHANGE_WINDOW}; drift is tested against its own reference "
        f"({REPRESENTATION_INFO} lists the current ones). Check that the document encoder "
        "migrated too, recall@k on the golden set before and after, and the probe set's "
        "neighbour stability (rag-monitor report drift).",
        for_="0m",
    )
    # The cause is known, not suspected; the description keeps the latest release.
    changed["annotations"]["suspected_cause"] = "embedding_model_change"
    return RuleFragment(alerting=[drifted, changed], promtool_tests=PROMTOOL_TESTS)


def rows(config: DriftConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """p-value against the significance level, the MMD statistic, the verdict, and the age of
    the last test (empty panels before the first test: no result yet, not a result of 0)."""
    panels = [
        Panel(
            "p-value",
            [
                (f"min by (signal) ({P_VALUE}{{{JOB}}})", "{{signal}}"),
                (f"vector({config.p_value})", "significance"),
            ],
            width=6,
        ),
        Panel(
            "MMD statistic",
            [(f"max by (signal) ({MMD_STATISTIC}{{{JOB}}})", "{{signal}}")],
            width=6,
        ),
        Panel(
            "Drift detected",
            [(f"max by (signal) ({DETECTED}{{{JOB}}})", "{{signal}}")],
            kind="stat",
            width=6,
        ),
        Panel(
            "Since the last test",
            [(f"time() - max by (signal) ({LAST_TEST}{{{JOB}}})", "{{signal}}")],
            kind="stat",
            unit="s",
            width=6,
        ),
    ]
    representations = [
        Panel(
            "Representations (query embedding models): share of recent vectors",
            [(f"max by (representation) ({REPRESENTATION_SHARE}{{{JOB}}})", "{{representation}}")],
            unit="percentunit",
            width=12,
        ),
        Panel(
            "Reference filled, per representation",
            [(f"min by (representation) ({REFERENCE_FILL}{{{JOB}}})", "{{representation}}")],
            unit="percentunit",
            width=12,
        ),
    ]
    info = f"max by (representation) ({REPRESENTATION_INFO}{{{JOB}}}"  # closed below
    changes = Annotation(
        name="Embedding model changes",
        expr=f"{info})\nunless\n{info} offset {_CHANGE_MARK})",
        title="embedding model {{representation}}",
        text="query vectors of {{representation}} first seen: tested against its own reference",
        tags="representation",
    )
    return [Row("Query drift (MMD)", panels + representations, annotations=[changes])]

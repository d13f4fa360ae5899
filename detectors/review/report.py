"""What reviews feed: the golden-set export and ``rag-monitor report review``.

The export writes one probe per reviewed item whose verdict names gold documents, in
the grammar ``detectors.filter_exclusion.golden_set`` reads (``probe_id`` and
``gold_doc_ids``; the other keys are for people and replay tools). The report shows
counts and statistics only: no query, answer, context or note appears in it, and every
string it does show (judge and evaluation names among them) is escaped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import orjson

from detectors.review.calibration import (
    DEFAULT_JUDGE,
    SUPPORTED_LABEL,
    UNSUPPORTED_LABEL,
    EvaluationAgreement,
    JudgeCalibration,
    Reviewed,
    SignalAssociation,
    evaluation_agreements,
    judge_calibrations,
    signal_associations,
)
from detectors.review.cascade import (
    FirstScoreBin,
    TierAgreement,
    cascade_tables,
    first_score_bins,
    tier_agreements,
)
from detectors.review.estimates import PassShare, interval_text, share_table
from detectors.review.model import REASONS, SUPPORTED, Progress, ReviewItem, Verdict
from monitor.contract.events import InvalidRecord, parse_labels
from monitor.contract.report_tables import Table, tables_html, tables_markdown


class ReviewedSource(Protocol):
    """What the export reads: ``ReviewStore`` is one."""

    def reviewed(self) -> list[tuple[ReviewItem, Verdict]]: ...


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- golden set ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GoldenExport:
    """What ``write_golden`` did with the reviewed items."""

    written: int
    without_gold: int  # the verdict named no relevant and no missing document
    invalid: int  # a document id the golden-set grammar refuses (empty, over 256 characters)


def golden_record(item: ReviewItem, verdict: Verdict) -> dict[str, Any] | None:
    """One probe: the reviewed trace's id as ``probe_id``, gold = relevant + missing ids."""
    gold = list(dict.fromkeys(verdict.relevant_doc_ids + verdict.missing_doc_ids))
    if not gold:
        return None
    return {
        "probe_id": item.trace_id,
        "gold_doc_ids": gold,
        "query": item.query,
        "tenant": item.tenant,
        "reviewed_at": _iso(verdict.reviewed_at),
    }


def write_golden(reviewed: Reviewed, out: Path) -> GoldenExport:
    """Write the probes of ``reviewed`` to ``out`` (JSON lines, replaced atomically)."""
    lines = []
    without_gold = invalid = 0
    for item, verdict in reviewed:
        record = golden_record(item, verdict)
        if record is None:
            without_gold += 1
            continue
        line = orjson.dumps(record)
        try:
            parse_labels(line)  # the reader's own grammar: a line it refuses is never written
        except InvalidRecord:
            invalid += 1
            continue
        lines.append(line + b"\n")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_bytes(b"".join(lines))
    os.replace(partial, out)
    return GoldenExport(len(lines), without_gold, invalid)


def export_golden(store: ReviewedSource, out: Path) -> int:
    """Write the reviewed items of ``store`` with gold ids as golden-set probes; the count."""
    return write_golden(store.reviewed(), out).written


# --- the report ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReviewReport:
    generated: float
    reviewed: int
    supported: dict[str, int]  # reviewer's verdict -> items
    reasons: dict[str, int]  # reason category -> items
    progress: Progress | None
    judges: list[JudgeCalibration]  # one per judge that scored a reviewed item, by name
    evaluations: list[EvaluationAgreement]  # one per evaluation compared with review, by name
    signals: list[SignalAssociation]
    golden: int  # reviewed items whose verdict names gold documents
    # The judge's, the reviewers' and the corrected pass shares (detectors/review/estimates.py)
    shares: list[PassShare] = field(default_factory=list)
    windows: tuple[str, str] | None = None  # (judged window, review window); None: not read
    # A judge cascade's tiers against reviewers, inside and outside its band, and the first
    # judge's agreement by its score (detectors/review/cascade.py); empty without one.
    tiers: list[TierAgreement] = field(default_factory=list)
    first_bins: list[FirstScoreBin] = field(default_factory=list)

    @property
    def judge(self) -> JudgeCalibration:
        """The calibration resting on the most pairs (HHEM's on a tie or with none)."""
        return max(self.judges, key=lambda j: (j.n, j.judge == DEFAULT_JUDGE))


def build_report(
    reviewed: Reviewed,
    progress: Progress | None = None,
    now: float | None = None,
    *,
    shares: Sequence[PassShare] = (),
    windows: tuple[str, str] | None = None,
) -> ReviewReport:
    """Everything the report shows, from reviewed items and their verdicts."""
    supported: dict[str, int] = dict.fromkeys(SUPPORTED, 0)
    reasons: dict[str, int] = dict.fromkeys(REASONS, 0)
    golden = 0
    for item, verdict in reviewed:
        supported[verdict.supported] += 1
        if verdict.reason is not None:
            reasons[verdict.reason] += 1
        golden += golden_record(item, verdict) is not None
    return ReviewReport(
        generated=time.time() if now is None else now,
        reviewed=len(reviewed),
        supported=supported,
        reasons=reasons,
        progress=progress,
        judges=judge_calibrations(reviewed),
        evaluations=evaluation_agreements(reviewed),
        signals=signal_associations(reviewed),
        golden=golden,
        shares=list(shares),
        windows=windows,
        tiers=tier_agreements(reviewed),
        first_bins=first_score_bins(reviewed),
    )


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}"


def judge_title(judge: str) -> str:
    """How the report names a judge: HHEM, or the judge's name with its model."""
    return "HHEM" if judge == DEFAULT_JUDGE else judge


def _judge_lines(judge: JudgeCalibration) -> list[str]:
    """The calibration in sentences (plain text: the renderers escape it)."""
    thresholds = ", ".join(f"{t:g}" for t in judge.thresholds) or "none"
    title = judge_title(judge.judge)
    lines = [
        f"{judge.n} reviewed items with a {title} score (threshold in use: {thresholds}); "
        f"{judge.no_claim} left out because the reviewer found no claim, "
        f"{judge.unscored} reviewed items no judge scored.",
        f"'partly' counts as unsupported ({judge.partly} such items in the matrix).",
        f"Agreement at the threshold in use: {_share(judge.agreement)}. "
        f"Precision of 'unsupported': {_share(judge.precision)}; "
        f"recall of 'unsupported': {_share(judge.recall)}.",
    ]
    best = judge.best
    if best is not None:
        lines.append(
            f"The observed score that would have agreed most with reviewers: {best.threshold:g} "
            f"(agreement {best.agreement:.1%}), 95% bootstrap interval "
            f"[{best.low:g}, {best.high:g}] from {best.resamples} resamples of n = {best.n}."
        )
    return lines


EVALUATION_HEAD = [
    "evaluation",
    "n",
    "pass, human supported",
    "pass, human unsupported",
    "fail, human supported",
    "fail, human unsupported",
    "agreement",
    "precision of fail",
    "recall of fail",
    "no claim (left out)",
]
EVALUATION_NOTE = (
    "Evaluations set compare_with_review in detectors.evaluations, on the reviewed items "
    "that carry their result (pass or fail by the evaluation's rule when the item was "
    "sampled). A pass is compared with the reviewer's 'yes'; a fail with 'no' or 'partly' "
    "('partly' counts as unsupported, as for a judge); 'no claim' is left out. Precision "
    "of 'fail': the share of the evaluation's fails reviewers called unsupported; recall: "
    "the share of the reviewers' unsupported answers it failed."
)


def _evaluation_row(evaluation: EvaluationAgreement) -> list[str]:
    cells = [
        evaluation.count(judge, human)
        for judge in (SUPPORTED_LABEL, UNSUPPORTED_LABEL)
        for human in (SUPPORTED_LABEL, UNSUPPORTED_LABEL)
    ]
    shares = (evaluation.agreement, evaluation.precision, evaluation.recall)
    return [
        evaluation.evaluation,
        str(evaluation.n),
        *(str(c) for c in cells),
        *(_share(v) for v in shares),
        str(evaluation.no_claim),
    ]


def _signal_row(signal: SignalAssociation) -> list[str]:
    (present_bad, present_ok), (absent_bad, absent_ok) = signal.table
    if signal.zero_cell:
        ratio, interval = "zero cell", "not estimable"
    else:
        ratio, interval = (
            _number(signal.odds_ratio),
            f"[{_number(signal.low)}, {_number(signal.high)}]",
        )
    counts = [present_bad, present_ok, absent_bad, absent_ok, signal.n]
    return [signal.kind, *(str(c) for c in counts), ratio, interval]


SIGNAL_HEAD = [
    "signal",
    "present, flagged",
    "present, fine",
    "absent, flagged",
    "absent, fine",
    "n",
    "odds ratio",
    "95% interval",
]
SIGNAL_NOTE = (
    "'Flagged': the reviewer said the answer was not supported (no, partly) or incomplete. "
    "An odds ratio above 1 means the signal comes more often with flagged answers. These are "
    "candidate signals: read a direction into one only when its interval excludes 1 on enough "
    "reviewed items, and recheck after the product or the traffic changes. Items oversampled "
    "for one signal (thumbs-down, follow-up) do not bias that signal's own odds ratio, but "
    "can bias the others'."
)


def _progress_rows(progress: Progress | None) -> list[list[str]]:
    if progress is None:
        return []
    strata = sorted(set(progress.queued) | set(progress.reviewed))
    return [[s, str(progress.queued.get(s, 0)), str(progress.reviewed.get(s, 0))] for s in strata]


def _judge_table(judge: JudgeCalibration) -> Table:
    """One judge's calibration section: its matrix against reviewers, and the sentences."""
    title = judge_title(judge.judge)
    labels = (SUPPORTED_LABEL, UNSUPPORTED_LABEL)
    matrix = [[f"{title} {h}", *(str(judge.count(h, p)) for p in labels)] for h in labels]
    return (
        f"Judge calibration: {title} against reviewers",
        ["", f"human {SUPPORTED_LABEL}", f"human {UNSUPPORTED_LABEL}"],
        matrix,
        _judge_lines(judge),
    )


def _tables(report: ReviewReport) -> list[Table]:
    """(title, header, rows, sentences) of each section, in order, as plain text."""
    verdicts = [[k, str(v)] for k, v in report.supported.items()]
    verdicts += [[f"reason: {k}", str(v)] for k, v in report.reasons.items() if v]
    golden = (
        f"{report.golden} of {report.reviewed} reviewed items name gold documents and go into "
        "`rag-monitor review export-golden`; the others are left out."
    )
    return [
        ("Queue", ["stratum", "queued", "reviewed"], _progress_rows(report.progress), []),
        ("Reviewers' verdicts", ["verdict", "items"], verdicts, [golden]),
        *(_judge_table(judge) for judge in report.judges),
        *cascade_tables(report.tiers, report.first_bins),
        share_table(report.shares, report.windows),
        (
            "Evaluation agreement with reviewers",
            EVALUATION_HEAD,
            [_evaluation_row(e) for e in report.evaluations],
            [EVALUATION_NOTE],
        ),
        (
            "Implicit signals against review",
            SIGNAL_HEAD,
            [_signal_row(s) for s in report.signals],
            [SIGNAL_NOTE],
        ),
    ]


def _subtitle(report: ReviewReport) -> str:
    return f"{_iso(report.generated)}: {report.reviewed} reviewed items"


def render_html(report: ReviewReport) -> str:
    return tables_html("Human review report", _subtitle(report), _tables(report))


def render_markdown(report: ReviewReport) -> str:
    return tables_markdown("Human review report", _subtitle(report), _tables(report))


def summary(report: ReviewReport) -> str:
    """One line for the terminal."""
    judges = "; ".join(_judge_summary(judge) for judge in report.judges)
    evaluations = "".join(
        f"; {e.evaluation} agreement {_share(e.agreement)} on {e.n}" for e in report.evaluations
    )
    signals = f"{len(report.signals)} implicit signals"
    shares = "".join(
        f"; {share.name} corrected {interval_text(share.corrected)}"
        for share in report.shares
        if share.corrected is not None
    )
    return f"{report.reviewed} reviewed; {judges}{evaluations}{shares}; {signals}"


def _judge_summary(judge: JudgeCalibration) -> str:
    best = judge.best
    tail = (
        f"best threshold {best.threshold:g} [{best.low:g}, {best.high:g}] (n = {best.n})"
        if best
        else "no scored item reviewed"
    )
    return f"{judge_title(judge.judge)} agreement {_share(judge.agreement)} on {judge.n}, {tail}"


def write_report(
    reviewed: Sequence[tuple[ReviewItem, Verdict]],
    out: Path,
    progress: Progress | None = None,
    now: float | None = None,
    *,
    shares: Sequence[PassShare] = (),
    windows: tuple[str, str] | None = None,
) -> ReviewReport:
    """Build the report and write ``out`` (.html or .md)."""
    suffix = out.suffix.lower()
    if suffix not in (".html", ".htm", ".md"):
        raise ValueError(f"--out {out}: write .html or .md")
    report = build_report(reviewed, progress, now, shares=shares, windows=windows)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = render_markdown(report) if suffix == ".md" else render_html(report)
    out.write_text(text, encoding="utf-8")
    return report

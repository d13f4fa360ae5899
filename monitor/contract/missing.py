"""No score without evidence: what a detector counts when a trace lacks a field it reads.

A detector whose input is missing (no contexts with text to judge an answer against, no
tokens to price, no query vector to test) must not turn the absence into a value: HHEM
on an empty premise, a $0 request, a zero vector would each move a guardrail exactly
when the monitor is blind. It counts the trace instead, once per field it needed and
did not get, in ``rag_monitor_detector_missing_inputs_total{detector,field}``, and goes
on without it. Every detector shares this one counter, so one query shows what each
detector could not see.

The field names are those of the pipeline's field coverage (``monitor.contract.field_presence``,
``rag_trace_fields_total``), the ones a component names in ``DetectorComponent.fields``:
coverage says what production requests carry, this counter what each detector, on every
trace it looked at, had to do without.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter

from monitor.contract.field_presence import PRESENT
from monitor.contract.names import MISSING_INPUTS_TOTAL
from monitor.contract.sidecar_registry import SidecarRegistry


class MissingInputs:
    """One detector's counts of the traces it could not use, by the field they lacked.

    Its series exist at 0 from the start, so a rate over them is defined before the first
    miss."""

    def __init__(self, registry: SidecarRegistry, detector: str, fields: Iterable[str]) -> None:
        counter = registry.family(
            Counter,
            MISSING_INPUTS_TOTAL,
            "Traces a detector could not use because a field it reads was missing (no "
            "contexts with text, no answer, no usage, no query vector, ...), by detector and "
            "field: counted instead of computing a value from nothing.",
            ["detector", "field"],
        )
        self._children = {}
        for field in fields:
            if field not in PRESENT:
                raise ValueError(
                    f"{field!r} is not a field of the coverage (monitor.contract.field_presence)"
                )
            self._children[field] = counter.labels(detector, field)

    def count(self, field: str) -> None:
        """Count one trace that lacked ``field``."""
        self._children[field].inc()

"""Which evaluation results were counted already, so that a repeat counts once.

One verdict can arrive more than once: as a ``gen_ai.evaluation.result`` span event and
as a log record of the same producer, in an export retried after a lost reply, in a
Kafka record redelivered after a rebalance. Two results are the same result when they
name the same trace, the same evaluated span (or none), the same evaluation and the same
``gen_ai.response.id`` (or none), and say the same: score, label and ``error.type``. What
a result says belongs to it because producers send several results of one evaluation on
one span: splunk-otel-util-genai sends a judge's verdict and a second judge's failure
(``error.type``) under one name, span and response id, and both count. So two copies of
one verdict are one result, whichever way each came; two results of one evaluation on two
answers of one trace that name neither their span nor their response id are one result
only when they also agree. A result naming neither a trace nor a response cannot be told
from another: it counts each time.

The last ``capacity`` results are remembered, least recently seen forgotten first: that
is the horizon within which a repeat is recognized, counted in results, not seconds.
Each is kept as the 64-bit hash of its identity, not its strings: a tenth of the memory,
and two different results share a hash with a chance near ``capacity / 2**64``.
"""

from __future__ import annotations

from collections import OrderedDict

from monitor.contract.trace import EvaluationResult


def result_identity(result: EvaluationResult, trace_id: str | None = None) -> int | None:
    """The hash of what makes ``result`` the same result when seen again; ``trace_id`` is
    the trace it arrived in (a ``rag-trace/1`` record's results name none of their own).
    None when it names neither a trace nor a response."""
    trace = result.trace_id or trace_id
    if trace is None and result.response_id is None:
        return None
    return hash((trace, result.span_id, result.name, result.response_id, result.score,
                 result.label, result.error_type))  # fmt: skip


class CountedResults:
    """The identities of the last ``capacity`` results counted."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._seen: OrderedDict[int, None] = OrderedDict()  # least recently seen first

    def __len__(self) -> int:
        return len(self._seen)

    def first_time(self, result: EvaluationResult, trace_id: str | None = None) -> bool:
        """True the first time ``result`` is seen within the horizon (it is remembered
        then), False for a repeat."""
        identity = result_identity(result, trace_id)
        if identity is None:
            return True
        if identity in self._seen:
            self._seen.move_to_end(identity)
            return False
        self._seen[identity] = None
        if len(self._seen) > self._capacity:
            self._seen.popitem(last=False)
        return True

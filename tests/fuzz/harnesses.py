"""One fuzz harness per entry point that takes outside bytes.

A harness hands the raw bytes to the function its transport calls (``tests/fuzz/targets.py``
imports them all). The invariant: the call returns, or raises one of the harness's
``refusals``, the exception types its caller turns into a 4xx, a dead letter or a count.
Any other exception propagates: to atheris a crash, to ``tests/fuzz/test_fuzz.py`` a
failure. The time and memory bounds are libFuzzer's (``-timeout``, ``-rss_limit_mb``,
``-max_len``), set by ``tests/fuzz/run.py`` from the budgets below.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from types import ModuleType

from monitor.contract.sidecar_registry import SidecarRegistry
from tests.fuzz import targets

# The review page's form budget (detectors.review.http.max_body_bytes) and head budget
# (max_header_bytes): the largest request the page reads.
_REVIEW = targets.ReviewHttpSettings(port=0)
REVIEW_MAX_LEN = _REVIEW.max_header_bytes + _REVIEW.max_body_bytes
# A request head at most: every HTTP listener's default max_header_bytes.
HEAD_MAX = _REVIEW.max_header_bytes
# Inputs of the other harnesses: larger ones only slow the search down (a decode is linear
# in its input); the receivers' 8 MiB body bound is held before decoding.
MAX_LEN = 65_536
# Seconds one input may take: a hang or a super-linear decode of at most MAX_LEN bytes.
TIMEOUT_S = 5
# The fuzzing process's resident memory at most: the interpreter, the project and the
# libraries it imports (about 100 MB measured) plus headroom for the decoders' budget of
# OTLP_DECODE_FACTOR (16) times an input of MAX_LEN, which is 1 MiB.
RSS_LIMIT_MB = 1024

# The review page the harness talks to: a bearer token, one queued item, and a fixed
# signing secret, so that the seeds carry a valid session cookie and CSRF field and the
# fuzzer reaches the verdict path through a cookie session too.
REVIEW_TOKEN = "fuzz-token"  # noqa: S105 (the harness page's, known to its seeds)
REVIEW_SECRET = bytes(32)
REVIEW_ITEM = targets.ReviewItem(
    trace_id="0af7651916cd43dd8448eb211c80319c",
    time=1.0,
    query="how long do returns take?",
    answer="Returns are accepted for thirty days.",
    contexts=(targets.ReviewContext("d1", text="thirty days"), targets.ReviewContext("d2")),
    strata=("random",),
    queued_at=1.0,
)


@dataclass(frozen=True)
class Harness:
    """An entry point, the exceptions that are its refusals, and the bounds of one input."""

    name: str
    entry: str  # what it calls, printed with the run's figures
    refusals: tuple[type[Exception], ...]
    open: Callable[[], Callable[[bytes], object]]  # builds the call once per process
    max_len: int = MAX_LEN
    # The decoding modules whose line coverage tests/fuzz/run.py reports
    modules: tuple[ModuleType, ...] = ()

    def check(self, data: bytes) -> None:
        """One input: a result or a refusal; anything else propagates (a crash)."""
        with contextlib.suppress(*self.refusals):
            _opened(self)(data)


@cache
def _opened(harness: Harness) -> Callable[[bytes], object]:
    return harness.open()


def _kafka_trace(payload_format: str) -> Callable[[], Callable[[bytes], object]]:
    def opened() -> Callable[[bytes], object]:
        metrics = targets.PipelineMetrics(SidecarRegistry())
        return lambda data: targets.decode_trace_record(data, payload_format, metrics)  # type: ignore[arg-type]

    return opened


def _kafka_logs() -> Callable[[bytes], object]:
    metrics = targets.PipelineMetrics(SidecarRegistry())
    return lambda data: targets.decode_logs_record(data, metrics)


def _scratch_file(suffix: str) -> Path:
    """A file the file-reading harnesses rewrite for each input (tmpfs where there is one)."""
    shm = Path("/dev/shm")
    folder = tempfile.mkdtemp(prefix="rag-monitor-fuzz-", dir=shm if shm.is_dir() else None)
    return Path(folder) / f"input{suffix}"


def _inspect() -> Callable[[bytes], object]:
    """``rag-monitor inspect FILE``: read the file, group its spans, map and render each trace."""
    path = _scratch_file(".otlp")
    mapping = targets.load_config(None, environ={}).collectors.spans.mapping

    def call(data: bytes) -> object:
        path.write_bytes(data)
        spans, problems = targets.read_otlp_file(path)
        reports = [targets.inspect_trace(trace, mapping) for trace in targets.group_traces(spans)]
        return [targets.render(report) for report in reports], targets.summary(reports), problems

    return call


def _config() -> Callable[[bytes], object]:
    """``rag-monitor --config FILE``: the YAML file read and validated, without the environment."""
    path = _scratch_file(".yaml")

    def call(data: bytes) -> object:
        path.write_bytes(data)
        return targets.load_config(path, environ={})

    return call


class UnexpectedAnswer(AssertionError):
    """A server answered 500 (its answer to a handler that failed), or its pipeline died."""


@cache
def review_page() -> tuple[targets.ReviewPage, targets.ReviewStore]:
    """The page the harness talks to (see REVIEW_TOKEN), with its store."""
    store = targets.ReviewStore(_scratch_file("").parent)
    store.add(REVIEW_ITEM)
    page = targets.ReviewPage(
        _REVIEW, store, REVIEW_TOKEN, lambda item, verdict: None, SidecarRegistry()
    )
    page._secret = REVIEW_SECRET
    return page, store


def _served(service: targets.HttpService, data: bytes) -> targets.Response | None:
    """One HTTP request as the server reads it (the head, then the declared body) through
    the service's ``refuse`` and ``handle``, as ``monitor/contract/http/service.py`` calls them;
    None where the server answers on its own or waits for more bytes."""
    end = data.find(targets.HEAD_END) + len(targets.HEAD_END)
    if end < len(targets.HEAD_END) or end > service.limits.max_header_bytes:
        return None  # the server waits for the rest of the head, or answers 431
    request = targets.parse_head(data[:end])
    if request is None:
        return None  # 400 malformed
    response = service.refuse(request)
    if response is None and request.framed:
        length = request.content_length or 0
        if len(data) - end < length:
            return None  # the server waits for the rest of the body
        response = service.handle(replace(request, body=data[end : end + length]))
    return response


def _review_page() -> Callable[[bytes], object]:
    """One request to the review page."""
    page, store = review_page()

    def call(data: bytes) -> object:
        response = _served(page, data)
        if response is not None and response.status >= 500:
            raise UnexpectedAnswer(f"answered {response.status}")
        if store.verdict(REVIEW_ITEM.trace_id) is not None:
            # Put the item back unreviewed: every input starts from the same page.
            store.delete_older_than(math.inf)
            store.add(REVIEW_ITEM)
        return response

    return call


def _otlp_http() -> Callable[[bytes], object]:
    """One request to the OTLP/HTTP receiver (``/v1/traces``, ``/v1/logs``, ``/v1/labels``,
    ``/v1/feedback``; gzip or not), whose spans and events go on into a running pipeline
    of the default span assembly (no grace) and no detectors. A 503 is the full queue's
    answer unless the pipeline died: a death is found at the input that killed it or the
    next few (the pipeline thread takes the items in batches)."""
    config = targets.load_config(None, environ={}).collectors
    registry = SidecarRegistry()
    assembly = targets.SpanAssembly(
        config.spans.assembly.model_copy(update={"grace_s": 0.0}), config.spans.mapping
    )
    pipeline = targets.Pipeline(assembly, [], targets.PipelineMetrics(registry))
    pipeline.start()
    receiver = targets.OtlpHttpReceiver(config.otlp, pipeline)

    def call(data: bytes) -> object:
        response = _served(receiver, data)
        if (response is not None and response.status == 500) or not pipeline.alive():
            raise UnexpectedAnswer("the handler failed or the pipeline died")
        return response

    return call


_OTLP = (targets.otlp,)
_LOGS = (targets.otlp, targets.otlp_logs, targets.span_evaluations)
_KAFKA = (targets.records, targets.export_decoding, targets.otlp, targets.events)
_TRACE_REFUSALS = (targets.PayloadError,)
# KafkaCollector._handle's: each becomes a dead letter (or a count, without a topic)
_KAFKA_REFUSALS = (targets.export_decoding.Refusal,)

HARNESSES: dict[str, Harness] = {
    h.name: h
    for h in (
        Harness("otlp_traces_proto", "decode_otlp_proto", _TRACE_REFUSALS,
                lambda: targets.decode_otlp_proto, modules=_OTLP),
        Harness("otlp_traces_json", "decode_otlp_json", _TRACE_REFUSALS,
                lambda: targets.decode_otlp_json, modules=_OTLP),
        Harness("otlp_logs_proto", "decode_logs_proto", _TRACE_REFUSALS,
                lambda: targets.decode_logs_proto, modules=_LOGS),
        Harness("otlp_logs_json", "decode_logs_json", _TRACE_REFUSALS,
                lambda: targets.decode_logs_json, modules=_LOGS),
        Harness("kafka_otlp_proto", "decode_trace_record(format=otlp_proto)", _KAFKA_REFUSALS,
                _kafka_trace("otlp_proto"), modules=_KAFKA),
        Harness("kafka_otlp_json", "decode_trace_record(format=otlp_json)", _KAFKA_REFUSALS,
                _kafka_trace("otlp_json"), modules=_KAFKA),
        Harness("kafka_rag_trace", "decode_trace_record(format=rag_trace_json)",
                _KAFKA_REFUSALS, _kafka_trace("rag_trace_json"),
                modules=(*_KAFKA, targets.trace)),
        Harness("kafka_auto", "decode_trace_record(format=auto)", _KAFKA_REFUSALS,
                _kafka_trace("auto"), modules=_KAFKA),
        Harness("kafka_logs", "decode_logs_record", _KAFKA_REFUSALS, _kafka_logs,
                modules=(*_KAFKA, targets.otlp_logs)),
        Harness("labels", "parse_labels", (targets.InvalidRecord,),
                lambda: targets.parse_labels, modules=(targets.events,)),
        Harness("feedback", "parse_feedback", (targets.InvalidRecord,),
                lambda: targets.parse_feedback, modules=(targets.events,)),
        Harness("otlp_http", "OtlpHttpReceiver.refuse/handle, then the pipeline", (),
                _otlp_http, max_len=HEAD_MAX + MAX_LEN,
                modules=(targets.otlp_http, targets.assembly, targets.openinference,
                         targets.tools)),
        Harness("review_page", "ReviewPage.refuse/handle", (), _review_page,
                max_len=REVIEW_MAX_LEN,
                modules=(targets.wire, targets.review_web, targets.review_form)),
        Harness("inspect_files", "read_otlp_file + inspect_trace + render", (), _inspect,
                modules=(targets.inspect_command, targets.inspect_provenance,
                         targets.inspect_missing, targets.inspect_view, targets.openinference)),
        Harness("config", "load_config", (targets.ConfigError,), _config,
                modules=(targets.config_loading,)),
    )
}  # fmt: skip

"""``rag-monitor inspect``: the onboarding tool for an instrumentation the mapping does not know.

It reads OTLP traces from files (OTLP/JSON, one ``ExportTraceServiceRequest`` a line as the
Collector's ``file`` exporter writes, or one JSON document; protobuf, one message or the
``format: proto`` file exporter's messages, each after a 4-byte big-endian length) or
receives them for a while as an OTLP/HTTP receiver, maps each trace as the sidecar does and
prints every field with the span and attribute it came from, what is missing and why, and
a ``mapping:`` snippet that would fill a missing field: ``provenance`` (origins),
``missing`` (reasons), ``suggest`` (settings), ``view`` (the terminal view).

Production text is printed: the operator runs this on their own traces. The terminal view
escapes control characters and shortens long texts; ``--json`` prints values whole.
A malformed line, message or file is reported on stderr (where, why) and skipped.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import orjson

from monitor.contract.command import Command

if TYPE_CHECKING:  # imported when used: ``rag-monitor --help`` loads this module
    from collectors.otlp.decode import DecodedSpans
    from collectors.spans.span import Span
    from monitor.contract.config import Config

USAGE_ERROR = 2
NOTHING_READ = 1
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_LENGTH_PREFIX = 4


# --- reading OTLP files ---------------------------------------------------------------------


def read_otlp_file(path: Path) -> tuple[list[Span], list[str]]:
    """The spans of an OTLP file, and one line per part that could not be read."""
    from collectors.otlp.decode import PayloadError

    try:
        data = path.read_bytes()
    except OSError as exc:
        return [], [f"{path}: cannot read: {exc.strerror or exc}"]
    spans: list[Span] = []
    problems: list[str] = []
    for where, body, decode in _payloads(data):
        if decode is None:
            problems.append(f"{path}{where}: {body.decode()}")
            continue
        try:
            decoded = decode(body)
        except PayloadError as exc:
            problems.append(f"{path}{where}: {exc}")
            continue
        spans.extend(decoded.spans)
        if decoded.rejected:
            problems.append(
                f"{path}{where}: {decoded.rejected} span(s) refused: {decoded.first_error}"
            )
    return spans, problems


_Decode = Callable[[bytes], "DecodedSpans"]


def _payloads(data: bytes) -> Iterator[tuple[str, bytes, _Decode | None]]:
    """(where, payload, its decoder) for each request in a file; a problem comes with
    no decoder and its reason as the payload."""
    from collectors.otlp.decode import decode_otlp_proto

    if data.startswith(_ZSTD_MAGIC):
        yield "", b"zstd-compressed (the file exporter's compression): run zstd -d first", None
        return
    text = data.lstrip()
    if not text:
        yield "", b"empty", None
    elif text[:1] == b"{":
        yield from _json_payloads(data)
    elif data[:1] == b"\x0a":  # field 1 (resource_spans), length-delimited: one bare message
        yield "", data, decode_otlp_proto
    elif int.from_bytes(data[:_LENGTH_PREFIX], "big") + _LENGTH_PREFIX <= len(data):
        yield from _framed_payloads(data)  # the first length prefix fits the file
    else:
        yield "", b"neither OTLP/JSON nor OTLP protobuf", None


def _json_payloads(data: bytes) -> Iterator[tuple[str, bytes, _Decode | None]]:
    from collectors.otlp.decode import decode_otlp_json

    lines = [(number, line) for number, line in enumerate(data.splitlines(), 1) if line.strip()]
    if len(lines) > 1:
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError:
            for number, line in lines:  # JSON lines
                yield f", line {number}", line, decode_otlp_json
            return
    yield "", data, decode_otlp_json


def _framed_payloads(data: bytes) -> Iterator[tuple[str, bytes, _Decode | None]]:
    from collectors.otlp.decode import decode_otlp_json, decode_otlp_proto

    offset, index = 0, 1
    while offset < len(data):
        where = f", message {index} (byte {offset})"
        start = offset + _LENGTH_PREFIX
        size = int.from_bytes(data[offset:start], "big")
        if start > len(data) or start + size > len(data):
            yield where, b"truncated: the length prefix runs past the end of the file", None
            return
        body = data[start : start + size]
        yield where, body, decode_otlp_json if body[:1] == b"{" else decode_otlp_proto
        offset, index = start + size, index + 1


# --- receiving OTLP/HTTP --------------------------------------------------------------------


class _Received:
    """The consumer behind the receiver: keeps the spans of every export."""

    def __init__(self) -> None:
        from monitor.contract.pipeline_metrics import PipelineMetrics
        from monitor.contract.sidecar_registry import SidecarRegistry

        self.metrics = PipelineMetrics(SidecarRegistry())
        self.spans: list[Span] = []
        self._lock = threading.Lock()

    def submit(self, item: Any, timeout: float | None = None) -> bool:
        from monitor.contract.work_items import SpanBatch

        if isinstance(item, SpanBatch):
            with self._lock:
                self.spans.extend(item.spans)
        return True


def receive_otlp(config: Config, port: int, seconds: float, out: IO[str]) -> list[Span]:
    """Spans exported to an OTLP/HTTP receiver on ``port`` (the sidecar's own, with the
    ``collectors.otlp`` settings) within ``seconds``; Ctrl-C ends the wait early."""
    from collectors.otlp.http import OtlpHttpReceiver
    from monitor.contract.components import write_token

    otlp = config.collectors.otlp
    settings = otlp.model_copy(update={"http": otlp.http.model_copy(update={"port": port})})
    received = _Received()
    receiver = OtlpHttpReceiver(settings, received, write_token(config.service.auth_token_env))
    receiver.start()
    try:
        out.write(
            f"listening on {settings.http.host}:{receiver.port} for {seconds:g} s "
            "(OTLP/HTTP POST /v1/traces, protobuf or JSON)\n"
        )
        out.flush()
        time.sleep(seconds)
    except KeyboardInterrupt:
        pass
    finally:
        receiver.stop_intake(2.0)
        receiver.shutdown()
    return received.spans


# --- traces ---------------------------------------------------------------------------------


def group_traces(spans: Iterable[Span]) -> list[list[Span]]:
    """Spans grouped by trace, traces in the order first seen; a span sent twice counts once."""
    traces: dict[str, dict[str, Span]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, {})[span.span_id] = span
    return [list(held.values()) for held in traces.values()]


# --- the command ----------------------------------------------------------------------------


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="OTLP file: JSON lines or one JSON document, protobuf bare or length-prefixed",
    )
    parser.add_argument(
        "--listen", type=int, metavar="PORT", help="receive OTLP/HTTP on PORT (0: a free one)"
    )
    parser.add_argument("--seconds", type=float, metavar="N", help="how long to listen")
    parser.add_argument("--json", action="store_true", help="one JSON object per trace")


def _usage_problem(args: argparse.Namespace) -> str | None:
    if bool(args.files) == (args.listen is not None):
        return "give FILE... or --listen PORT --seconds N"
    if args.listen is not None:
        if not 0 <= args.listen <= 65535:
            return "--listen takes a TCP port, 0 to 65535"
        if args.seconds is None or not args.seconds > 0:
            return "--listen needs --seconds N, more than 0"
    elif args.seconds is not None:
        return "--seconds goes with --listen"
    return None


def run(args: argparse.Namespace, config: Config) -> int:
    """Inspect the traces of the files or the receiver; 0 when a trace was inspected,
    1 when none could be read, 2 on a usage error."""
    from collectors.inspect.view import escaped

    problem = _usage_problem(args)
    if problem is not None:
        print(f"rag-monitor inspect: {problem}", file=sys.stderr)
        return USAGE_ERROR
    spans: list[Span] = []
    if args.listen is not None:
        try:
            spans = receive_otlp(config, args.listen, args.seconds, sys.stderr)
        except (OSError, ValueError) as exc:  # port taken, unset token variable
            print(f"rag-monitor inspect: cannot listen: {exc}", file=sys.stderr)
            return USAGE_ERROR
    for path in args.files:
        read, problems = read_otlp_file(path)
        spans += read
        for line in problems:
            print(f"rag-monitor inspect: {escaped(line)}", file=sys.stderr)
    traces = group_traces(spans)
    if not traces:
        print("rag-monitor inspect: no readable traces", file=sys.stderr)
        return NOTHING_READ
    try:
        print_reports(
            traces, config.collectors.spans.mapping, config.service.instrumentations, args.json
        )
    except BrokenPipeError:  # | head: the reader has what it wanted
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the flush at exit must not fail)
    return 0


def print_reports(
    traces: Sequence[Sequence[Span]], mapping: Any, instrumentations: Sequence[str], as_json: bool
) -> None:
    from collectors.inspect.provenance import inspect_trace
    from collectors.inspect.suggest import constant_documents
    from collectors.inspect.view import render, summary

    reports = [inspect_trace(trace, mapping) for trace in traces]
    proposed: list[set[str]] = [set() for _ in traces]
    refused: dict[str, str] = {}
    # Suggest again without the refused settings, until what else fills the documents (a
    # json_documents section over the same list, say) is refused too or differs per trace.
    while new := {
        setting: reason
        for setting, reason in constant_documents(reports).items()
        if setting not in refused
    }:
        for seen, report in zip(proposed, reports, strict=True):
            seen.update(report["suggested_documents"])
        refused |= new
        reports = [inspect_trace(trace, mapping, refused) for trace in traces]
    for seen, report in zip(proposed, reports, strict=True):
        del report["suggested_documents"]  # the texts are in the fields, once pasted
        if seen & refused.keys():
            report["refused"] = [refused[setting] for setting in sorted(seen & refused.keys())]
    for report in reports:
        sys.stdout.write(orjson.dumps(report).decode() if as_json else render(report))
        sys.stdout.write("\n")
    if not as_json:
        sys.stdout.write(summary(reports, instrumentations, list(refused.values())))
    sys.stdout.flush()


INSPECT = Command(
    ("inspect",),
    "map OTLP traces from files or a short OTLP/HTTP capture and show each field's span and "
    "attribute, what is missing and why, and mapping: settings that would fill it",
    _arguments,
    run,
)

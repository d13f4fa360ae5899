"""Write the fuzz harnesses' seed corpora: ``python tests/fuzz/seeds.py [HARNESS...]``.

The seeds are the test fixtures' inputs (the SDK export and the bodies the unit tests
build, ``tests/testdata``), a few KB each, written to ``tests/fuzz/corpus/<harness>/``
under names that say what they are. Running it again rewrites them (the SDK export carries the time it was made).
"""

from __future__ import annotations

import gzip
import struct
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.conftest import (  # noqa: E402
    golden_set_lines,
    json_body,
    json_span,
    many_documents,
    sdk_request,
    to_otlp_json,
    worked_example_records,
)
from tests.fuzz.harnesses import REVIEW_ITEM, REVIEW_TOKEN, review_page  # noqa: E402
from tests.unit.collectors.kafka.test_record_formats import EVALUATION, _json_logs  # noqa: E402
from tests.unit.collectors.otlp.test_logs import logs_request  # noqa: E402

TESTDATA = ROOT / "tests" / "testdata"
CORPUS = Path(__file__).resolve().parent / "corpus"


def trace_seeds() -> dict[str, bytes]:
    proto = sdk_request()
    return {
        "sdk_export.pb": proto,
        "one_span.pb": _one_span_proto(),
        "sdk_export.json": to_otlp_json(proto),
        "value_kinds.json": json_body(json_span(attributes=[
            {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "x"}]}}},
            {"key": "k", "value": {"kvlistValue": {"values": [
                {"key": "z", "value": {"doubleValue": 0.5}}]}}},
            {"key": "b", "value": {"bytesValue": "AAE="}},
            {"key": "t", "value": {"boolValue": True}},
        ])),
        "documents.json": json_body(json_span(attributes=many_documents(3))),
        "agent_tools.json": json_body(*_agent_spans()),
        "agent_events.json": json_body(*_agent_event_spans()),
        "bad_ids.json": json_body(json_span(traceId="00" * 16), json_span(spanId="zz")),
    }  # fmt: skip


def _agent_spans() -> list[dict[str, object]]:
    """An agent run: a chat call and a retrieval tool whose result is a LangChain
    ``ToolMessage`` holding the documents as JSON text (collectors/spans/tools.py)."""
    documents = orjson.dumps([{"id": "d1", "text": "Refunds: 30 days.", "tenant": "acme"}])
    result = orjson.dumps({"type": "tool", "data": {"content": documents.decode()}})

    def attributes(**values: str) -> list[dict[str, object]]:
        return [{"key": k, "value": {"stringValue": v}} for k, v in values.items()]

    run, tool, chat = "a1" * 8, "b2" * 8, "c3" * 8
    return [
        json_span(spanId=run, name="invoke_agent", attributes=attributes(**{
            "gen_ai.operation.name": "invoke_agent", "input.value": "refund period?"})),
        json_span(spanId=tool, parentSpanId=run, name="execute_tool", attributes=attributes(**{
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
            "gen_ai.tool.call.result": result.decode()})),
        json_span(spanId=chat, parentSpanId=run, name="chat", attributes=attributes(**{
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini"})),
    ]  # fmt: skip


def _agent_event_spans() -> list[dict[str, object]]:
    """An agent run traced as strands-agents does: the question and the answer as events of
    the run span, the tool's result as an event of the tool call's span."""
    documents = orjson.dumps([{"text": orjson.dumps([{"id": "d1", "text": "30 days."}]).decode()}])

    def event(name: str, **values: str) -> dict[str, object]:
        pairs = [{"key": k, "value": {"stringValue": v}} for k, v in values.items()]
        return {"name": name, "timeUnixNano": "1544712660000000000", "attributes": pairs}

    def operation(name: str) -> list[dict[str, object]]:
        return [{"key": "gen_ai.operation.name", "value": {"stringValue": name}}]

    run, tool, chat = "d4" * 8, "e5" * 8, "f6" * 8
    return [
        json_span(spanId=chat, parentSpanId=run, name="chat", attributes=operation("chat")),
        json_span(spanId=run, name="invoke_agent", attributes=operation("invoke_agent"),
                  events=[event("gen_ai.user.message", content='[{"text": "refund period?"}]'),
                          event("gen_ai.choice", message="Thirty days.\n")]),
        json_span(spanId=tool, parentSpanId=run, name="execute_tool",
                  attributes=operation("execute_tool"),
                  events=[event("gen_ai.tool.message", content='{"query": "refunds"}'),
                          event("gen_ai.choice", message=documents.decode())]),
    ]  # fmt: skip


def _one_span_proto() -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    span = scope.spans.add(
        trace_id=bytes.fromhex(REVIEW_ITEM.trace_id), span_id=b"\1" * 8, name="s",
        start_time_unix_nano=1, end_time_unix_nano=2,
    )  # fmt: skip
    span.attributes.add(key="openinference.span.kind").value.string_value = "CHAIN"
    return bytes(request.SerializeToString())


def logs_seeds() -> dict[str, bytes]:
    plain = {"body": {"stringValue": "GET /health 200"}}
    return {
        "evaluations.pb": logs_request(),
        "evaluation.json": _json_logs(EVALUATION),
        "plain_line.json": _json_logs(plain),
        "event_name_attribute.json": _json_logs({"attributes": [
            {"key": "event.name", "value": {"stringValue": "gen_ai.evaluation.result"}},
            {"key": "gen_ai.evaluation.score.value", "value": {"doubleValue": 0.4}},
        ]}),
    }  # fmt: skip


def rag_trace_seeds() -> dict[str, bytes]:
    records = worked_example_records()
    return {
        "example.json": (TESTDATA / "rag_trace_example.json").read_bytes(),
        "probe.json": orjson.dumps(records[0]),
        "leak.json": orjson.dumps(records[-1]),
    }


def label_seeds() -> dict[str, bytes]:
    lines = golden_set_lines().splitlines()
    return {
        "probe.json": lines[0].encode(),
        "list.json": b"[" + b",".join(line.encode() for line in lines) + b"]",
        "trace.json": orjson.dumps({"trace_id": REVIEW_ITEM.trace_id, "gold_doc_ids": ["d1"]}),
    }


def feedback_seeds() -> dict[str, bytes]:
    trace = REVIEW_ITEM.trace_id
    return {
        "thumbs_down.json": orjson.dumps({"trace_id": trace, "kind": "thumbs_down",
                                          "reason": "wrong", "session_id": "s1"}),
        "click.json": orjson.dumps({"trace_id": trace, "kind": "click", "doc_id": "d1"}),
        "list.json": orjson.dumps([{"trace_id": trace, "kind": "dwell", "dwell_seconds": 12.5},
                                   {"trace_id": trace, "kind": "regenerate"}]),
    }  # fmt: skip


def review_seeds() -> dict[str, bytes]:
    page, _ = review_page()
    session = "fuzz-session"
    cookie = page._set_cookie(session)["Set-Cookie"].split(";", 1)[0]
    form = (
        f"supported=partly&reason=incomplete&relevant=d1&missing=d9+d10"
        f"&note=close&skip=abc&csrf={page._csrf(session)}"
    ).encode()
    verdict = f"/review/{REVIEW_ITEM.trace_id}"

    def post(headers: str, body: bytes) -> bytes:
        return (
            f"POST {verdict} HTTP/1.1\r\nHost: x\r\n{headers}"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    return {
        "page_bearer.http": f"GET /review?skip=a,b HTTP/1.1\r\nAuthorization: Bearer "
        f"{REVIEW_TOKEN}\r\n\r\n".encode(),
        "token_link.http": f"GET /review?token={REVIEW_TOKEN} HTTP/1.1\r\n\r\n".encode(),
        "page_cookie.http": f"GET /review HTTP/1.1\r\nCookie: {cookie}\r\n\r\n".encode(),
        "verdict_bearer.http": post(f"Authorization: Bearer {REVIEW_TOKEN}\r\n", form),
        "verdict_cookie.http": post(f"Cookie: {cookie}\r\n", form),
        "verdict_no_csrf.http": post(f"Cookie: {cookie}\r\n", b"supported=yes"),
    }


def otlp_http_seeds() -> dict[str, bytes]:
    traces, logs = trace_seeds(), logs_seeds()

    def post(path: str, media: str, body: bytes, gzipped: bool = False) -> bytes:
        encoding = "Content-Encoding: gzip\r\n" if gzipped else ""
        body = gzip.compress(body, mtime=0) if gzipped else body
        return (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {media}\r\n{encoding}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    protobuf, json = "application/x-protobuf", "application/json"
    return {
        "traces.http": post("/v1/traces", protobuf, traces["one_span.pb"]),
        "traces_json_gzip.http": post("/v1/traces", json, traces["value_kinds.json"], True),
        "agent_tools.http": post("/v1/traces", json, traces["agent_tools.json"]),
        "agent_events.http": post("/v1/traces", json, traces["agent_events.json"]),
        "logs.http": post("/v1/logs", protobuf, logs["evaluations.pb"]),
        "logs_json.http": post("/v1/logs", json, logs["evaluation.json"]),
        "labels.http": post("/v1/labels", json, label_seeds()["trace.json"]),
        "feedback.http": post("/v1/feedback", json, feedback_seeds()["click.json"]),
    }


def inspect_seeds() -> dict[str, bytes]:
    proto = sdk_request()
    as_json = to_otlp_json(proto)
    return {
        "lines.jsonl": as_json + b"\n" + json_body(json_span()) + b"\n",
        "one_document.json": as_json,
        "bare.pb": proto,
        "framed.pb": b"".join(struct.pack(">I", len(m)) + m for m in (proto, _one_span_proto())),
    }


def config_seeds() -> dict[str, bytes]:
    return {
        "design.yaml": (TESTDATA / "design_config.yaml").read_bytes(),
        "small.yaml": b"service:\n  metrics: {port: 0}\ndetectors:\n  review: {enabled: true}\n",
        "moved_key.yaml": b"mapping: {}\n",
    }


def seeds() -> dict[str, dict[str, bytes]]:
    traces, logs, records = trace_seeds(), logs_seeds(), rag_trace_seeds()
    proto = {k: v for k, v in traces.items() if k.endswith(".pb")}
    json = {k: v for k, v in traces.items() if k.endswith(".json")}
    return {
        "otlp_traces_proto": proto,
        "otlp_traces_json": json,
        "otlp_logs_proto": {k: v for k, v in logs.items() if k.endswith(".pb")},
        "otlp_logs_json": {k: v for k, v in logs.items() if k.endswith(".json")},
        "kafka_otlp_proto": proto,
        "kafka_otlp_json": json,
        "kafka_rag_trace": records,
        "kafka_auto": {**traces, **records},
        "kafka_logs": logs,
        "labels": label_seeds(),
        "feedback": feedback_seeds(),
        "otlp_http": otlp_http_seeds(),
        "review_page": review_seeds(),
        "inspect_files": inspect_seeds(),
        "config": config_seeds(),
    }


def main(names: list[str]) -> None:
    for harness, files in seeds().items():
        if names and harness not in names:
            continue
        folder = CORPUS / harness
        folder.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (folder / name).write_bytes(data)


if __name__ == "__main__":
    main(sys.argv[1:])

"""A strands-agents agent for tests/conformance/test_strands.py, run only by the python of
the venv ``.venv-strands`` (tests/conformance/strands-requirements.txt: strands-agents
needs openai below 3, rag-monitor's venv has 3), so it imports nothing of the repository.

usage: python strands_app.py <sidecar /v1/traces URL> <fake OpenAI base URL> <results JSON>
       [<OTLP file>]

The agent is an ``Agent`` on ``OpenAIModel`` (chat completions, streamed) with one tool,
``search_knowledge_base``, whose result for a query is the harness's (``results``: the
JSON list of documents per query, as ``agent_harness.search_knowledge_base`` returns it).
Strands traces itself (``StrandsTelemetry``, its OTLP/HTTP exporter): the root
``invoke_agent <name>`` span carries the run's summed usage; each event loop cycle
(``execute_event_loop_cycle``) holds one ``chat`` span and the cycle's ``execute_tool``
spans; question, answer and tool results are span events (``gen_ai.user.message``,
``gen_ai.choice``; under ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``
``gen_ai.client.inference.operation.details``).

Once the agent is built the script prints ``ready``; then, for each line on stdin (a
question, as JSON), it runs a fresh agent (one conversation per request), flushes its spans
to the sidecar and prints a JSON line: the answer (the final message's text) and the
queries the tool was called with, in order. With an OTLP file, it also writes every span
there (protobuf, as the Collector's file exporter keeps them) when stdin ends: what
``rag-monitor inspect`` reads.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from strands import Agent, tool
from strands.models.openai import OpenAIModel
from strands.telemetry import StrandsTelemetry

MODEL = "gpt-4o-mini"  # agent_harness.MODEL
AGENT_NAME = "rag-agent"

QUERIES: list[str] = []
RESULTS: dict[str, str] = {}


@tool
def search_knowledge_base(query: str) -> str:
    """Search the company knowledge base. Returns the matching documents as a JSON list.

    Args:
        query: what to search for
    """
    QUERIES.append(query)
    return RESULTS.get(query, "[]")


def answer_text(result: Any) -> str:
    """The final message's text (``str(result)`` ends each text block with a newline)."""
    return "".join(block["text"] for block in result.message["content"] if "text" in block)


def main() -> None:
    traces_url, base_url, results, *spans_file = sys.argv[1:]
    RESULTS.update(json.loads(results))
    telemetry = StrandsTelemetry().setup_otlp_exporter(endpoint=traces_url)
    kept = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(kept))
    model = OpenAIModel(client_args={"api_key": "sk-test", "base_url": base_url}, model_id=MODEL)
    print("ready", flush=True)
    for line in sys.stdin:
        QUERIES.clear()
        agent = Agent(
            name=AGENT_NAME, model=model, tools=[search_knowledge_base], callback_handler=None
        )
        answer = answer_text(agent(json.loads(line)))
        telemetry.tracer_provider.force_flush()
        print(json.dumps({"answer": answer, "queries": QUERIES}), flush=True)
    telemetry.tracer_provider.shutdown()
    if spans_file:
        with open(spans_file[0], "wb") as out:
            out.write(encode_spans(kept.get_finished_spans()).SerializeToString())


if __name__ == "__main__":
    main()

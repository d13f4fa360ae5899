"""Producer for tests/conformance/test_phoenix_evals.py: a RAG app that judges its own
answers online with arize-phoenix-evals, traced and exported by arize-phoenix-otel.

usage: python phoenix_evals_producer.py <sidecar base url> <judge base url> <requests>

Each request is a CHAIN root span (``rag.variant``: every fourth canary) above the LLM
span of its generation (written by the app: the answers are fixed). Inside it the app runs two of the library's evaluators, whose own tracing writes one EVALUATOR span
each below the root, its verdict in ``output.value``: ``relevance``, an LLM
ClassificationEvaluator whose judge is the OpenAI-compatible endpoint at the judge URL
(its LLM spans below the EVALUATOR span), and ``has_citation``, a code evaluator. Every
fifth answer makes the judge answer a label outside the choices: the library raises.

The spans go to ``<base>/v1/traces`` through ``phoenix.otel.register`` (OTLP/HTTP,
protobuf). Last the script prints one JSON line per verdict: the request, its trace id,
and either the library's Score (``Score.to_dict()``) or the exception it raised.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from phoenix.evals import LLM, ClassificationEvaluator, Evaluator, create_evaluator
from phoenix.otel import register

ANSWERS = (
    "The library opens at nine [1].",
    "The weather will be sunny tomorrow.",
    "It opens at nine on weekdays and ten on Saturdays [2].",
)


@create_evaluator(name="has_citation", kind="code")
def has_citation(output: str) -> bool:
    """Whether the answer cites a document: ``[n]``."""
    return "[" in output and "]" in output


def relevance_judge(judge_url: str) -> Evaluator:
    """The LLM judge of relevance, on the OpenAI client of the library's LLM wrapper."""
    llm = LLM(provider="openai", model="gpt-4o-mini", base_url=judge_url,
              api_key="sk-conformance-test")  # fmt: skip
    return ClassificationEvaluator(
        name="relevance",
        llm=llm,
        prompt_template="Question: {input}\nAnswer: {output}\nIs the answer relevant?",
        choices={"relevant": 1.0, "unrelated": 0.0},
    )


def answer_for(index: int) -> str:
    """Request ``index``'s answer; every fifth is garbled, which the judge cannot label."""
    answer = ANSWERS[index % len(ANSWERS)]
    return answer + " (garbled)" if index % 5 == 0 else answer


def main(base: str, judge_url: str, requests: int) -> None:
    provider = register(endpoint=f"{base}/v1/traces", protocol="http/protobuf",
                        project_name="rag-app", batch=False, verbose=False)  # fmt: skip
    tracer = provider.get_tracer("rag-app")
    relevance = relevance_judge(judge_url)
    verdicts: list[dict[str, Any]] = []
    for index in range(requests):
        question = f"Question {index}: when does the library open?"
        answer = answer_for(index)
        attributes = {"openinference.span.kind": "CHAIN", "input.value": question,
                      "output.value": answer,
                      "rag.variant": "canary" if index % 4 == 3 else "production"}  # fmt: skip
        with tracer.start_as_current_span("rag.request", attributes=attributes) as root:
            generation = {"openinference.span.kind": "LLM", "llm.model_name": "gpt-4o-mini",
                          "output.value": answer}  # fmt: skip
            tracer.start_span("generate", attributes=generation).end()
            trace_id = format(root.get_span_context().trace_id, "032x")
            for evaluator in (relevance, has_citation):
                verdict: dict[str, Any] = {"request": index, "trace_id": trace_id}
                try:
                    scores = evaluator.evaluate({"input": question, "output": answer})
                except ValueError as error:
                    verdicts.append({**verdict, "error": type(error).__name__})
                    continue
                verdicts.extend({**verdict, "score": score.to_dict()} for score in scores)
    provider.shutdown()
    for verdict in verdicts:
        print(json.dumps(verdict), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))

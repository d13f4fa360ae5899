"""The log pipeline's redaction stage: request text never reaches a log line."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
import structlog

from monitor.runtime.log import REDACTED, RedactText, configure_logging
from tests.conftest import REPO


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"query": "secret", "trace_id": "t1"}, {"query": REDACTED, "trace_id": "t1"}),
        ({"request": {"answer": "secret", "n": 2}}, {"request": {"answer": REDACTED, "n": 2}}),
        ({"items": [{"text": "secret"}, 3]}, {"items": [{"text": REDACTED}, 3]}),
        ({"a": {"b": {"c": {"prompt": "secret"}}}}, {"a": {"b": {"c": {"prompt": REDACTED}}}}),
        ({"contexts": [{"doc_id": "d1"}]}, {"contexts": REDACTED}),
    ],
    ids=["top-level", "nested-mapping", "list-of-mappings", "deep", "whole-value"],
)
def test_text_keys_are_redacted_at_any_depth(
    event: dict[str, Any], expected: dict[str, Any]
) -> None:
    """A text-bearing key is redacted wherever it sits; other values pass unchanged."""
    assert RedactText()(None, "info", dict(event)) == expected


def test_pathological_nesting_is_cut_not_recursed_forever() -> None:
    """Past the depth limit a value is redacted whole rather than walked."""
    nested: dict[str, Any] = {"leaf": "x"}
    for _ in range(50):
        nested = {"n": nested}
    out = RedactText()(None, "info", {"deep": nested})
    depth, node = 0, out["deep"]
    while isinstance(node, dict):
        node, depth = node["n"], depth + 1
    assert node == REDACTED
    assert depth < 50


@pytest.mark.usefixtures("restored_logging")
def test_configured_logger_writes_json_without_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    """configure_logging renders JSON on stderr with nested request text redacted."""
    configure_logging("info")
    structlog.get_logger("t").info("seen", trace_id="t1", request={"query": "my secret question"})
    line = capsys.readouterr().err.strip().splitlines()[-1]
    record = json.loads(line)
    assert record["event"] == "seen"
    assert record["request"] == {"query": REDACTED}
    assert "my secret question" not in line


# Everything that writes to stderr in a running sidecar: structlog and stdlib loggers (with
# and without an exception), a warning, an exception escaping a thread, one escaping a
# destructor, and finally one escaping the main thread.
_EVERY_KIND_OF_LINE = """
import gc, logging, threading, warnings
import structlog
from monitor.runtime.log import configure_logging

configure_logging("info")
log = structlog.get_logger("probe")
log.info("started", query="my secret question")
try:
    {}["missing"]
except KeyError:
    log.exception("structlog_exception")
    logging.getLogger("kafka").exception("stdlib_exception")
warnings.warn("a library warning")

def fail():
    raise ZeroDivisionError("in a thread")

worker = threading.Thread(target=fail, name="worker-1")
worker.start()
worker.join()

class Leaky:
    def __del__(self):
        raise ValueError("in a destructor")

Leaky()
gc.collect()
raise RuntimeError("in the main thread")
"""


def test_every_line_is_json_including_uncaught_tracebacks() -> None:
    """A process set up like ``rag-monitor run`` writes only JSON lines, tracebacks of
    exceptions escaping a thread, a destructor or the main thread included."""
    done = subprocess.run(
        [sys.executable, "-c", _EVERY_KIND_OF_LINE],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1  # the main thread's exception still ends the process
    lines = (done.stdout + done.stderr).splitlines()
    records = [json.loads(line) for line in lines]  # raises on any plain-text line
    warning, *_ = (r for r in records if "UserWarning: a library warning" in r["event"])
    assert warning["level"] == "warning"
    events = {record["event"]: record for record in records if record is not warning}
    assert list(events) == [
        "started",
        "structlog_exception",
        "stdlib_exception",
        "thread_exception",
        "unraisable_exception",
        "uncaught_exception",
    ]
    assert events["started"]["query"] == REDACTED
    assert "KeyError" in events["structlog_exception"]["exception"]
    assert "KeyError" in events["stdlib_exception"]["exception"]
    assert events["thread_exception"]["thread"] == "worker-1"
    assert "ZeroDivisionError: in a thread" in events["thread_exception"]["exception"]
    assert "ValueError: in a destructor" in events["unraisable_exception"]["exception"]
    assert "RuntimeError: in the main thread" in events["uncaught_exception"]["exception"]

"""``rag-monitor inspect`` as an operator runs it to onboard a service: on the spans a
conformance app exported, written as an OTLP protobuf file, in a process of its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import yaml
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from tests.conftest import REPO


def otlp_file(spans: Any, tmp_path: Path) -> Path:
    """The spans as an OTLP protobuf file, as the Collector's file exporter would keep them."""
    path = tmp_path / "traces.otlp"
    path.write_bytes(encode_spans(spans).SerializeToString())
    return path


def inspect_snippet(path: Path, traces: int) -> tuple[str, dict[str, Any]]:
    """What ``rag-monitor inspect`` prints for the OTLP file at ``path`` of ``traces``
    traces, and the merged ``mapping:`` snippet of its summary as a user would paste it
    (empty when the summary suggests nothing)."""
    # Its own process, as a user runs it: the command configures logging process-wide.
    shown = subprocess.run(
        [sys.executable, "-m", "monitor", "inspect", str(path)],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    summary = text[text.rindex("\n" + f"{traces} trace(s)") :]
    snippets = suggested_mappings(summary)
    assert len(snippets) <= 1, summary
    return text, snippets[0] if snippets else {}


def suggested_mappings(printed: str) -> list[dict[str, Any]]:
    """Every snippet under a ``suggested mapping`` line of what ``inspect`` printed (each
    trace's, then the summary's), as YAML read back."""
    lines = printed.splitlines()
    snippets = []
    for at, line in enumerate(lines):
        if not line.lstrip().startswith("suggested mapping"):
            continue
        indent = len(line) - len(line.lstrip())
        body = []
        for below in lines[at + 1 :]:
            if not below.strip() or len(below) - len(below.lstrip()) <= indent:
                break
            body.append(below)
        snippets.append(yaml.safe_load(textwrap.dedent("\n".join(body))) or {})
    return snippets

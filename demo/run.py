"""``rag-monitor demo``: the sidecar plus a synthetic RAG service with scripted incidents.

The service sends real OTLP/HTTP spans with OpenInference attributes through
the opentelemetry-sdk exporter, so the demo exercises the same path as
production traffic. The timeline cycles through incidents; the live view
(``demo.view``) shows what the sidecar sees: redrawn every second on a terminal, fitted
to its size (``demo.board``), a plain text block every 10 s otherwise, or one JSON
object per refresh (``--json``).
The process's log goes to ``demo.log`` in the state directory, not over the view.
A model a detector needs and this machine lacks is fetched first (``demo.fetch``).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import structlog

from demo.board import as_text
from demo.fetch import FETCH_HOW, fetch_missing_models
from demo.service import (
    ALL_DOCUMENT_TYPES,
    DEFAULT_CYCLE_S,
    INTENTS,
    PROBES_PER_TENANT,
    RATE_PER_S,
    RELEASES,
    SHADOW_SHARE,
    TENANTS,
    SyntheticRagService,
    probe_and_gold,
)
from demo.view import WINDOW_SHARE, Links, LiveView, Snapshot, as_json
from monitor.contract.config import Config

log = structlog.get_logger("rag_monitor.demo")

LOG_NAME = "demo.log"  # in the state directory
INTERRUPTED = 130  # the shell's status for a process stopped by Ctrl-C
REFRESH_S = 1.0  # on a terminal
PLAIN_EVERY_S = 10.0  # otherwise
# Erase the screen once; then each frame goes home, ends each line with erase-to-end and
# the frame with erase-below, so that a redraw neither flickers nor leaves old text.
CLEAR, HOME, ERASE_LINE, ERASE_BELOW = "\x1b[2J", "\x1b[H", "\x1b[K", "\x1b[J"
# Answers the faithfulness judge scores from the random stratum alone in the view's window
# (a tenth of the cycle); the probes and thumbs-downs it always scores come on top: about
# 140 production answers in the default cycle's 30 s window, on which the page's upper
# bound falls below the guardrail 10-20 s into the 45 s "answers stray" incident. A shorter
# cycle asks more answers a second of the judge (the default's: about 6 with the twins).
SCORED_PER_WINDOW = 60


def with_demo_settings(config: Config, cycle_s: float = DEFAULT_CYCLE_S) -> Config:
    """The demo's golden set (unless the config names one), drift windows sized to its
    20 requests/s, so that the incidents show within minutes, faithfulness sampled enough
    for the view's window of a ``cycle_s`` cycle, the review queue on, and its intents and
    document types sliced (unless the config names intents)."""
    detectors = config.detectors
    filter_exclusion = detectors.filter_exclusion
    if filter_exclusion.golden_set is None:
        path = config.service.state_dir / "demo-golden-set.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for tenant in TENANTS:
            for number in range(PROBES_PER_TENANT):
                probe, gold = probe_and_gold(tenant, number)
                lines.append(json.dumps({"probe_id": probe, "gold_doc_ids": [gold]}))
        path.write_text("\n".join(lines) + "\n")
        filter_exclusion = filter_exclusion.model_copy(update={"golden_set": path})
    drift = detectors.drift.model_copy(
        update={"reference_size": 400, "window_size": 200, "test_every_records": 100}
    )
    # The review loop on (README "Human review"): the demo's text is synthetic, and a
    # larger random share fills the queue within a minute at 20 requests/s.
    review = detectors.review.model_copy(update={"enabled": True, "random_rate": 0.05})
    slices = detectors.slices
    if not slices.intents:
        slices = slices.model_copy(
            update={"intents": list(INTENTS), "document_types": list(ALL_DOCUMENT_TYPES)}
        )
    # The demo's shadow twins are paired (README "Shadow comparison").
    shadow = detectors.shadow.model_copy(update={"enabled": True})
    # A share of the requests (and their twins) to the judge: SCORED_PER_WINDOW a window.
    per_s = SCORED_PER_WINDOW / (cycle_s * WINDOW_SHARE)
    faithfulness = detectors.faithfulness.model_copy(
        update={
            "sample_rate": min(1.0, per_s / RATE_PER_S),
            "max_per_second": max(detectors.faithfulness.max_per_second, 2 * per_s),
        }
    )
    update = {
        "faithfulness": faithfulness,
        "filter_exclusion": filter_exclusion,
        "drift": drift,
        "review": review,
        "slices": slices,
        "shadow": shadow,
    }
    return config.model_copy(update={"detectors": detectors.model_copy(update=update)})


def warn_missing_models(config: Config) -> list[str]:
    """Log, per model a detector needs and this machine lacks, the command that fetches it;
    returns them as "detector needs model"."""
    from monitor.contract.components import load_components

    missing = []
    for component in load_components():
        section = getattr(config.detectors, component.name, None)
        if component.models is None or section is None:
            continue
        for model in component.models.missing(section):
            log.warning(
                "demo_model_missing", detector=component.name, model=model, how_to_fix=FETCH_HOW
            )
            missing.append(f"{component.name} needs {model}")
    return missing


def run_demo(
    config: Config, duration_s: float | None, config_path: Path | None, as_json_lines: bool
) -> int:
    """Run the sidecar and the synthetic service until ``duration_s`` or a signal, the log
    in the state directory's ``demo.log``; 1 when the sidecar cannot start, 130 when the
    fetch of a missing model was interrupted.

    The live view evaluates exactly the conditions ``rag-monitor rules`` generates
    (``alerts.rules.build_rules``), never its own copy.
    """
    config = with_demo_settings(config, duration_s or DEFAULT_CYCLE_S)
    # Before stderr goes to the log: the fetch's progress and where the models went are for
    # the person who started the demo, and the board erases the screen only after them.
    if not fetch_missing_models(config):
        return INTERRUPTED
    log_path = config.service.state_dir / LOG_NAME
    with _stderr_to(log_path):
        problem = _serve(config, duration_s, config_path, as_json_lines, log_path)
    if problem:
        print(f"{problem} (log: {log_path})", file=sys.stderr)
        return 1
    return 0


def _serve(
    config: Config,
    duration_s: float | None,
    config_path: Path | None,
    as_json_lines: bool,
    log_path: Path,
) -> str | None:
    """Run the demo; the reason it could not start, if it could not."""
    from alerts.rules import build_rules
    from monitor.runtime.sidecar import Sidecar

    missing = warn_missing_models(config)
    try:
        sidecar = Sidecar(config)
    except ValueError as exc:  # e.g. a detector whose extra is not installed
        return f"invalid configuration: {exc}"
    sidecar.start()
    if sidecar.http is None:
        sidecar.shutdown()
        return "the demo sends OTLP/HTTP: set collectors.otlp.http.enabled: true"
    http = config.collectors.otlp.http
    endpoint = f"http://{http.host}:{sidecar.http.port}/v1/traces"
    service = SyntheticRagService(endpoint, cycle_s=duration_s or DEFAULT_CYCLE_S)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    links = _links(config, sidecar.metrics_server.port, config_path, log_path)
    service.start()
    log.info(
        "demo_started",
        metrics=links.metrics,
        rate_per_s=RATE_PER_S,
        duration_s=duration_s,
        releases=f"{RELEASES[0]} -> {RELEASES[1]} when the latency incident starts",
        shadow_share=SHADOW_SHARE,
    )
    lag_s = config.collectors.spans.assembly.grace_s
    rules = build_rules(config)
    view = LiveView(sidecar.registry, rules, service, links, missing_models=missing, lag_s=lag_s)
    terminal = sys.stdout.isatty()
    every_s = REFRESH_S if terminal else PLAIN_EVERY_S
    if terminal and isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="replace")  # the trend's bars, on a terminal without them
    if terminal and not as_json_lines:
        sys.stdout.write(CLEAR)
    try:
        for snapshot in _refreshes(view, stop, duration_s, every_s):
            _show(snapshot, as_json_lines, terminal)
    finally:
        service.shutdown()
        sidecar.shutdown()
    log.info("demo_stopped", sent=service.sent, shadow_sent=service.shadow_sent)
    if not as_json_lines:
        print(f"demo stopped: {service.sent} requests sent; log: {log_path}", flush=True)
    return None


def _links(config: Config, metrics_port: int, config_path: Path | None, log_path: Path) -> Links:
    """Where to look next, with the demo's --config on each command."""
    metrics = config.service.metrics
    review = config.detectors.review
    option = "" if config_path is None else f" --config {shlex.quote(str(config_path))}"
    return Links(
        metrics=f"http://{metrics.host}:{metrics_port}/metrics",
        review=f"http://{review.http.host}:{review.http.port}/review" if review.enabled else None,
        commands=[
            f"rag-monitor report review{option}",
            f"rag-monitor report shadow{option}",
            f"rag-monitor report drift{option}",
            f"rag-monitor rules{option}  (the rules this view evaluates)",
        ],
        docs="docs/pages/getting-started.md#what-you-see; runbooks: docs/pages/alerts.md",
        log=str(log_path),
    )


def _refreshes(
    view: LiveView, stop: threading.Event, duration_s: float | None, every_s: float
) -> Iterator[Snapshot]:
    """A snapshot every ``every_s`` seconds and at the end of ``duration_s``, until told
    to stop."""
    deadline = time.monotonic() + duration_s if duration_s else float("inf")
    while not stop.wait(min(every_s, max(0.0, deadline - time.monotonic()))):
        yield view.snapshot()
        if time.monotonic() >= deadline:
            return


def _show(snapshot: Snapshot, as_json_lines: bool, terminal: bool) -> None:
    if as_json_lines:
        print(as_json(snapshot), flush=True)
    elif terminal:
        frame = f"{ERASE_LINE}\n".join(as_text(snapshot, *_board_size()))
        sys.stdout.write(f"{HOME}{frame}{ERASE_LINE}\n{ERASE_BELOW}")
        sys.stdout.flush()
    else:
        print("\n".join(as_text(snapshot)) + "\n", flush=True)


def _board_size() -> tuple[int | None, int | None]:
    """The columns and rows the board may fill, read at every frame so that it follows a
    resize. One column short of the terminal's: a line that reaches the last column
    leaves the cursor there, where the erase-to-end-of-line after it may take the last
    character, and some terminals wrap. One row short: each frame's last newline leaves
    the cursor on the row below it, which must not scroll the title off (and the line
    that says the demo stopped lands there). A terminal that reports no size (0) gets
    the whole board, as a pipe does.

    The terminal itself is asked, not ``shutil.get_terminal_size``: that prefers
    ``COLUMNS`` and ``LINES`` from the environment, fixed when the process started (GNU
    readline exports them in a process that loads it, and its children inherit them),
    which no resize updates."""
    try:
        columns, rows = os.get_terminal_size(sys.stdout.fileno())
    except (OSError, ValueError):  # stdout replaced or closed: no size to fit
        return None, None
    return (columns - 1 if columns > 0 else None, rows - 1 if rows > 0 else None)


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while the demo runs: structlog, stdlib logging
    and native libraries all write there, and none of it may land on the view."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with path.open("w") as log_file:
        os.dup2(log_file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)

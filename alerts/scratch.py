"""A scratch Prometheus for ``rag-monitor rules backtest``, and the promtool and HTTP
calls around it.

The backtest replays rules with Prometheus's own engine: counters become TSDB blocks
(``promtool tsdb create-blocks-from openmetrics``), recording rules are backfilled
into more blocks (``create-blocks-from rules``, which asks a running Prometheus), and
alert conditions are read back with ``query_range``. The scratch server scrapes
nothing and keeps everything it is given (retention of ten years).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

# Prometheus refuses a query_range of more than 11,000 points per series.
_CHUNK_POINTS = 10_000
# Block ranges promtool can write: 2h times powers of 3 (tsdb.ExponentialBlockRanges).
_BLOCK_RANGES_S = [7200 * 3**power for power in range(6)]
_READY_TIMEOUT_S = 120.0

Series = dict[frozenset[tuple[str, str]], list[tuple[float, str]]]


class BacktestError(Exception):
    """The backtest cannot run; the message says what to fix."""


def find_tools() -> tuple[str, str]:
    """The paths of ``promtool`` and ``prometheus``, or a ``BacktestError`` that says
    how to install them."""
    found = {name: shutil.which(name) for name in ("promtool", "prometheus")}
    missing = [name for name, path in found.items() if path is None]
    if missing:
        raise BacktestError(
            f"{' and '.join(missing)} not found on PATH: the backtest replays the rules with "
            "Prometheus's own engine; install Prometheus 2.x (Debian: apt install prometheus, "
            "or the release tarball from prometheus.io/download) and retry"
        )
    return found["promtool"] or "", found["prometheus"] or ""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def block_duration(eval_interval_s: float) -> str:
    """The longest block promtool may write whose evaluations fit in one query_range."""
    fitting = [span for span in _BLOCK_RANGES_S if span / eval_interval_s <= _CHUNK_POINTS]
    return f"{max(fitting, default=_BLOCK_RANGES_S[0]) // 3600}h"


def run_promtool(promtool: str, *arguments: str, cwd: Path | None = None) -> None:
    """Run ``promtool`` quietly; its own message in the error when it fails."""
    done = subprocess.run(
        [promtool, *arguments], capture_output=True, text=True, check=False, cwd=cwd
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise BacktestError(f"promtool {arguments[:3]} failed: " + " | ".join(tail))


def import_openmetrics(promtool: str, source: Path, data: Path) -> None:
    """Turn an OpenMetrics file into TSDB blocks under ``data``."""
    # Long blocks: promtool reads the whole file once per block.
    run_promtool(
        promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
        "--max-block-duration=1458h", str(source), str(data),
    )  # fmt: skip


class ScratchPrometheus:
    """A Prometheus on ``directory/data`` with no scrape targets, on a free local port."""

    def __init__(self, prometheus: str, directory: Path) -> None:
        self.directory = directory
        self.data = directory / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self._binary = prometheus
        self._config = directory / "prometheus.yml"
        self._config.write_text("global:\n  evaluation_interval: 1m\nscrape_configs: []\n")
        self._process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __enter__(self) -> ScratchPrometheus:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        log = (self.directory / "prometheus.log").open("ab")
        self._process = subprocess.Popen(
            [
                self._binary, f"--config.file={self._config}",
                f"--storage.tsdb.path={self.data}", "--storage.tsdb.retention.time=3650d",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log, stderr=log,
        )  # fmt: skip
        log.close()
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise BacktestError(
                    f"the scratch Prometheus exited; see {self.directory / 'prometheus.log'}"
                )
            try:
                ready = f"{self.url}/-/ready"  # our own http:// address
                with urllib.request.urlopen(ready, timeout=2) as answer:  # noqa: S310
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise BacktestError(f"the scratch Prometheus was not ready in {_READY_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        """Stop the server (safe twice)."""
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def add_blocks(self, staging: Path) -> None:
        """Move the blocks promtool wrote to ``staging`` in and restart, so that the next
        queries (and the next backfill layer) read them."""
        self.stop()
        for block in staging.iterdir():
            if block.is_dir():
                block.rename(self.data / block.name)
        self.start()


def api_get(url: str, path: str, **parameters: str) -> Any:
    """``data`` of a Prometheus HTTP API answer; ``BacktestError`` on an error answer."""
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise BacktestError(f"{url}: not the http:// or https:// address of a Prometheus")
    address = f"{url}{path}?{urllib.parse.urlencode(parameters)}"  # http(s), checked above
    try:
        with urllib.request.urlopen(address, timeout=300) as answer:  # noqa: S310
            body = json.load(answer)
    except OSError as error:
        raise BacktestError(f"{url}{path}: {error}") from error
    if body.get("status") != "success":
        raise BacktestError(f"{url}{path}: {body.get('error', body)}")
    return body["data"]


def query_range(url: str, expr: str, start: float, end: float, step: float) -> Series:
    """Every series ``expr`` returns from ``start`` to ``end`` (inclusive) at ``step``, read
    in chunks under the points limit: labels -> [(time, value)]."""
    series: Series = {}
    for chunk_start, chunk_end in chunks(start, end, step):
        data = api_get(
            url, "/api/v1/query_range",
            query=expr, start=f"{chunk_start:.3f}", end=f"{chunk_end:.3f}", step=f"{step:g}",
        )  # fmt: skip
        for result in data["result"]:
            key = frozenset(result["metric"].items())
            series.setdefault(key, []).extend((float(t), v) for t, v in result["values"])
    return series


def chunks(start: float, end: float, step: float) -> Iterator[tuple[float, float]]:
    """Consecutive [first, last] evaluation times covering start..end, each at most
    ``_CHUNK_POINTS`` evaluations, none shared."""
    first = start
    while first <= end:
        last = min(end, first + (_CHUNK_POINTS - 1) * step)
        yield first, last
        first = last + step


def write_openmetrics_series(
    out: TextIO, name: str, labels: dict[str, str], times: Sequence[str], values: Sequence[str]
) -> None:
    """One series as OpenMetrics sample lines, whole and in time order, for ``promtool tsdb
    create-blocks-from openmetrics`` (no ``# TYPE``: the PromQL that reads it needs none)."""
    text = ",".join(f'{key}="{_escaped(value)}"' for key, value in sorted(labels.items()))
    prefix = f"{name}{{{text}}} "
    out.writelines(f"{prefix}{value} {t}\n" for value, t in zip(values, times, strict=True))


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

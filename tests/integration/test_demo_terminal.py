"""The demo's board fits the terminal it runs in: under pseudo-terminals of 80x24,
100x30, 160x50 and 100x16, every frame `rag-monitor demo` draws, read back by a terminal
emulator (pyte), keeps its lines within the width and above the bottom row, and shows
the title, the incident line and a row per guardrail."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pyte
import pytest
from wcwidth import wcswidth

from demo.view import GUARDRAILS, GuardrailRow, IncidentRun, Links, Snapshot
from tests.integration.test_demo import demo_config, offline_environ, run_in_terminal

pytestmark = pytest.mark.integration

DURATION_S = 8  # a frame a second: enough frames, and an incident among them (20-40%)
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
HOME, ERASE_BELOW = b"\x1b[H", b"\x1b[J"  # what starts and what ends each frame


def frames(written: bytes, screen: pyte.Screen) -> Iterator[tuple[list[str], list[str]]]:
    """Per frame drawn: the lines it wrote (escape sequences removed), and the screen
    once it is drawn."""
    stream = pyte.ByteStream(screen)
    for chunk in written.split(ERASE_BELOW)[:-1]:
        stream.feed(chunk + ERASE_BELOW)
        text = ANSI.sub(b"", chunk.rsplit(HOME, 1)[-1]).decode().replace("\r", "")
        *lines, cursor_row = text.split("\n")  # each line ends with a newline
        assert cursor_row == ""
        yield lines, list(screen.display)


@pytest.mark.parametrize(
    ("columns", "rows", "trend", "short"),
    [
        (80, 24, False, False),
        (100, 30, True, False),
        (160, 50, True, False),
        (100, 16, True, True),  # shorter than the board: lines give way to a count of them
    ],
)
def test_every_frame_fits_the_terminal(
    tmp_path: Path, columns: int, rows: int, trend: bool, short: bool
) -> None:
    """No line is wider than the terminal and the frame leaves the bottom row free, so the
    screen shows the frame row for row (nothing wrapped, nothing scrolled, nothing left of
    the last frame); the title, the incident line and each guardrail's row are on it in
    every frame; the trend column is there, if shortened, from 100 columns on; and a
    terminal shorter than the board says how many lines it left out."""
    config = demo_config(tmp_path)
    argv = [sys.executable, "-m", "monitor", "demo", "--config", str(config)]
    # Stale sizes in the environment (readline sets them in a process that imports it):
    # the board must follow the terminal's own.
    env = {**offline_environ(tmp_path), "COLUMNS": "300", "LINES": "100"}
    argv = [*argv, "--duration", str(DURATION_S)]
    status, written = run_in_terminal(argv, 60, size=(columns, rows), env=env)
    assert status == 0, written.decode(errors="replace")[-3000:]
    screen = pyte.Screen(columns, rows)
    drawn = 0
    for lines, display in frames(written, screen):
        drawn += 1
        assert max(wcswidth(line) for line in lines) <= columns, lines
        assert len(lines) < rows, lines
        assert [row.rstrip() for row in display] == [
            line.rstrip() for line in lines + [""] * (rows - len(lines))
        ]
        assert display[0].startswith("rag-monitor demo · ")
        assert sum(row.startswith("incident now: ") for row in display) == 1
        for guardrail in GUARDRAILS:
            assert sum(row.startswith(guardrail.name + " ") for row in display) == 1, guardrail
        header = next(row for row in display if row.startswith("guardrail, "))
        assert header.rstrip().endswith("trend") == trend, header
        if short:
            assert re.fullmatch(r"\+\d+ more lines in a taller terminal", lines[-1]), lines
    assert drawn >= DURATION_S - 2  # a redraw a second
    # After the last frame, on the row it left free; a log path too long for the row wraps
    # there, whole, so that it can be copied.
    assert ANSI.sub(b"", written.rsplit(ERASE_BELOW, 1)[-1]).startswith(b"demo stopped: ")


STATES = ["ok", "BREACH", "too little evidence", "ok", "ok"]  # one per guardrail


def crowded_snapshot() -> Snapshot:
    """A board with more than the demo shows: a per-stage latency row, long alert lists,
    two missing models, and a log path with a control character and wide characters."""
    rows = [
        GuardrailRow(g.name, g.estimate, g.alert, state, 0.5, 0.4, 611, ">", 0.1, [0.1, None, 0.9])
        for g, state in zip(GUARDRAILS, STATES, strict=True)
    ]
    rows[1:2] = [
        replace(rows[1], guardrail=f"latency SLO {stage}") for stage in ("total", "generate")
    ]
    run = IncidentRun("cost spike (long prompts)", "RagCostPerQueryHigh", 150, 195, 160)
    names = [f"RagSomeLongAlertName{n}" for n in range(12)]
    return Snapshot(
        179.0, 300.0, 30.0, 20.1, 3.9, 3542.0, "demo-rag", "1.5.0", 60.0, run, None, None,
        rows, dict.fromkeys(names, "BREACH"), names, ["faithfulness needs a", "token needs b"],
        {}, Links("http://127.0.0.1:9464/metrics", "http://127.0.0.1:4320/review",
                  ["rag-monitor rules --config 'a very long path/of/its/config.yaml'"] * 4,
                  "docs/pages/getting-started.md#what-you-see", "/tmp/状态/x\x1b[2Jy/demo.log"),
    )  # fmt: skip


def test_the_board_fits_any_size_and_keeps_its_core() -> None:
    """As drawn for each size from 20x8 to 170x45: no line wider than the columns, no more
    lines than the rows, no control character; from 12 rows and 60 columns on, the title,
    the incident line and every guardrail row stay, and the lines of text left out are
    counted."""
    from demo.board import as_text

    snapshot = crowded_snapshot()
    for columns in range(20, 171, 5):
        for rows in range(8, 46, 3):
            lines = as_text(snapshot, columns, rows)
            assert len(lines) <= rows
            assert not [line for line in lines if re.search(r"[\x00-\x1f\x7f]", line)]
            assert max(wcswidth(line) for line in lines) <= columns, (columns, lines)
            if columns < 60 or rows < 12:
                continue
            assert lines[0].startswith("rag-monitor demo · ")
            assert sum(line.startswith("incident now: cost spike ") for line in lines) == 1
            for row in snapshot.guardrails:
                assert sum(line.startswith(row.guardrail + " ") for line in lines) == 1
            # Blank lines go first, uncounted: a count once a line with text must go.
            if len([line for line in as_text(snapshot, columns) if line]) > rows:
                assert lines[-1].endswith("more lines in a taller terminal"), (rows, lines)

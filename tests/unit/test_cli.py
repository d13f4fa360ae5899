"""The command line: verbs, exit codes, and a --help that loads no heavy library."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "alibi_detect", "phoenix", "grpc", "kafka")


def test_help_lists_the_verbs_without_heavy_imports() -> None:
    """--help names every verb and imports none of torch, transformers, alibi-detect, phoenix."""
    probe = (
        "import sys, contextlib, io\n"
        "from monitor.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "print(out.getvalue())\n"
        f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    for verb in ("run", "demo", "rules", "dashboard", "report", "check-config"):
        assert verb in result.stdout
    assert "HEAVY []" in result.stdout


@pytest.mark.parametrize("argv", [["report", "drift"]], ids=["report"])
def test_unfinished_verbs_exit_2_with_a_message(argv: list[str]) -> None:
    """Verbs that later work fills in say so and exit with code 2."""
    result = subprocess.run(
        [sys.executable, "-m", "monitor", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "not available yet" in result.stderr

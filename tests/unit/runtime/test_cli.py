"""The command line: verbs, exit codes, and a --help that loads no heavy library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "transformers", "alibi_detect", "phoenix", "grpc", "kafka")


def test_help_lists_the_verbs_without_heavy_imports() -> None:
    """--help names every verb and imports none of torch, transformers, alibi-detect, phoenix."""
    probe = (
        "import sys, contextlib, io\n"
        "from monitor.runtime.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):\n"
        "    main(['--help'])\n"
        "print(out.getvalue())\n"
        f"print('HEAVY', [m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    for verb in ("run", "demo", "rules", "dashboard", "report", "drift", "check-config"):
        assert verb in result.stdout
    assert "HEAVY []" in result.stdout


def test_report_drift_without_state_exits_1_with_a_message(tmp_path: Path) -> None:
    """`report drift` on a state directory without drift history says so and exits 1."""
    config = tmp_path / "monitor.yaml"
    config.write_text(f"service: {{state_dir: {tmp_path / 'state'}}}\n")
    result = subprocess.run(
        [sys.executable, "-m", "monitor", "report", "drift", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert "no drift state" in result.stderr

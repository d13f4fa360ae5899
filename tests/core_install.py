"""The core package alone (no extra) in a fresh venv, and a sidecar process run from it:
for tests/integration/test_core_install.py and tests/perf/bench_sidecar_rss.py."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import SidecarProcess

REPO = Path(__file__).resolve().parent.parent
# What the extras bring (pyproject.toml) and the core must not: import names.
OPTIONAL_MODULES = (
    "torch",
    "transformers",
    "onnx",
    "onnxruntime",
    "alibi_detect",
    "phoenix",
    "pyarrow",
    "matplotlib",
    "sentence_transformers",
)


def _package_sources() -> list[Path]:
    """pyproject.toml, the README it names, and the packages setuptools finds."""
    with (REPO / "pyproject.toml").open("rb") as f:
        include = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = [
        path
        for path in sorted(REPO.iterdir())
        if (path / "__init__.py").is_file()
        and any(fnmatch.fnmatch(path.name, pattern) for pattern in include)
    ]
    return [REPO / "pyproject.toml", REPO / "README.md", *packages]


def install_core(directory: Path) -> Path:
    """A venv under ``directory`` holding ``pip install <this checkout>`` without extras
    (from a copy, so that the build leaves nothing in the checkout); its bin directory.
    pip reuses the wheels it has cached or finds locally."""
    source = directory / "source"
    source.mkdir(parents=True)
    for path in _package_sources():
        if path.is_dir():
            shutil.copytree(path, source / path.name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / path.name)
    venv = directory / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(source)],
        check=True,
        timeout=900,
    )
    return venv / "bin"


def importable(bin_dir: Path, modules: tuple[str, ...]) -> list[str]:
    """Those of ``modules`` the venv's Python can find."""
    script = (
        "import sys, importlib.util as u; "
        "print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is not None))"
    )
    result = subprocess.run(
        [str(bin_dir / "python"), "-c", script, *modules],
        check=True,
        capture_output=True,
        text=True,
        cwd=bin_dir,
    )
    return result.stdout.split()


def core_environment() -> dict[str, str]:
    """This environment without what would point the core venv's programs at the checkout
    or at another venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


class CoreSidecar(SidecarProcess):
    """``rag-monitor run`` from the core venv, started outside the checkout so that only
    the installed copy can be imported."""

    def __init__(self, bin_dir: Path, directory: Path, config: dict[str, object]) -> None:
        super().__init__(directory, config, name="core-sidecar")
        self.bin_dir = bin_dir

    def start(self) -> CoreSidecar:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin_dir / "rag-monitor"), "run", "--config", str(self.config_path)],
                cwd=self.config_path.parent,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**core_environment(), "PYTHONUNBUFFERED": "1"},
            )
        return self

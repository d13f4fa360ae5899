"""A Hugging Face Hub double on loopback, and the tiny HHEM checkpoint as the hub publishes it.

The double serves what huggingface_hub 0.36's ``snapshot_download`` calls: the
model info of a revision (``/api/models/{repo}/revision/{rev}``) and ``HEAD``/``GET``
``/{repo}/resolve/{rev}/{file}`` with the headers it requires (``X-Repo-Commit``,
``ETag``, ``Content-Length``), and the ``X-Error-Code`` of its 404s. The hub
client reads ``HF_ENDPOINT`` at import, so what fetches from it runs as a subprocess
(``rag-monitor models fetch``, ``rag-monitor demo``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from detectors.faithfulness.hhem import DEFAULT_FOUNDATION, HHEM_REPO, PINNED_REVISIONS
from tests.hhem_checkpoint import build_checkpoint

INFO = re.compile(r"/api/models/(?P<repo>[^/]+/[^/]+)/revision/(?P<rev>[^/]+)")
RESOLVE = re.compile(r"/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)")
Files = dict[str, bytes]
Repos = dict[str, tuple[str, Files]]  # repository: its commit, and its files at that commit


@dataclass
class FakeHub:
    """Repositories at one commit each; every request is recorded."""

    repos: Repos
    requests: list[str] = field(default_factory=list)

    def find(self, repo: str, revision: str) -> tuple[str, Files] | str:
        """The commit and files of ``repo`` at ``revision``, or the hub's X-Error-Code."""
        if repo not in self.repos:
            return "RepoNotFound"
        commit, files = self.repos[repo]
        return (commit, files) if revision in (commit, "main") else "RevisionNotFound"


class _Handler(BaseHTTPRequestHandler):
    server: _HubServer

    def do_GET(self) -> None:
        self._answer(with_body=True)

    def do_HEAD(self) -> None:
        self._answer(with_body=False)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, with_body: bool) -> None:
        hub = self.server.hub
        path = unquote(urlsplit(self.path).path)
        hub.requests.append(f"{self.command} {path}")
        route = INFO.fullmatch(path) or RESOLVE.fullmatch(path)
        if route is None:
            return self._send(404, b"{}", {"X-Error-Code": "RepoNotFound"}, with_body)
        found = hub.find(route["repo"], route["rev"])
        if isinstance(found, str):
            return self._send(404, b"{}", {"X-Error-Code": found}, with_body)
        commit, files = found
        if route.re is INFO:
            siblings = [{"rfilename": name} for name in sorted(files)]
            info = {"id": route["repo"], "sha": commit, "siblings": siblings}
            return self._send(200, json.dumps(info).encode(), {}, with_body)
        if route["file"] not in files:
            return self._send(404, b"{}", {"X-Error-Code": "EntryNotFound"}, with_body)
        content = files[route["file"]]
        headers = {"X-Repo-Commit": commit, "ETag": f'"{hashlib.sha256(content).hexdigest()}"'}
        return self._send(200, content, headers, with_body)

    def _send(self, status: int, body: bytes, headers: dict[str, str], with_body: bool) -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        if with_body:
            self.wfile.write(body)


class _HubServer(ThreadingHTTPServer):
    hub: FakeHub


@contextmanager
def serve_hub(repos: Repos) -> Iterator[tuple[FakeHub, str]]:
    """The hub double serving ``repos`` on a free loopback port, and its endpoint URL."""
    server = _HubServer(("127.0.0.1", 0), _Handler)
    server.hub = FakeHub(repos)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.hub, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def files_of(directory: Path) -> Files:
    """Every file under ``directory`` by its relative path, as a repository holds them."""
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in directory.rglob("*") if p.is_file()
    }


@dataclass(frozen=True)
class PublishedHhem:
    """The tiny HHEM checkpoint and its foundation as the hub publishes them, the local
    checkpoint they were built from, and the model its weights came from."""

    hhem: Files
    foundation: Files
    local_checkpoint: Path
    model: Any

    def repos(self) -> Repos:
        """Both repositories at their pinned commits, as the hub double serves them."""
        return {
            HHEM_REPO: (PINNED_REVISIONS[HHEM_REPO], self.hhem),
            DEFAULT_FOUNDATION: (PINNED_REVISIONS[DEFAULT_FOUNDATION], self.foundation),
        }


def publish_hhem(root: Path) -> PublishedHhem:
    """Build the tiny HHEM checkpoint under ``root`` and lay it out as the hub does: its
    config names the foundation by hub id, beside files the sidecar never reads (the
    remote code, the foundation's weights)."""
    checkpoint, model = build_checkpoint(root)
    hhem = files_of(checkpoint)
    config = json.loads(hhem["config.json"])
    hhem["config.json"] = json.dumps({**config, "foundation": DEFAULT_FOUNDATION}).encode()
    hhem["modeling_hhem_v2.py"] = b"# remote code the sidecar never runs\n"
    foundation = files_of(root / "flan-t5-foundation")
    foundation["model.safetensors"] = b"foundation weights the scorer never reads"
    return PublishedHhem(hhem, foundation, checkpoint, model)


def hub_environ(root: Path, **settings: str) -> dict[str, str]:
    """This process's environment without its Hugging Face settings, with a cache of its
    own under ``root`` (empty until something fetches) and ``settings`` on top
    (``HF_ENDPOINT``, ``HF_HUB_OFFLINE``): what a subprocess that may fetch runs with."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env |= {"HF_HOME": str(root / "hf-home"), "HF_HUB_CACHE": str(root / "cache")}
    return env | settings

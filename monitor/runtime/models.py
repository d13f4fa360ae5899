"""``rag-monitor models fetch``: download the models the configured detectors read from disk.

The sidecar never downloads: it reads models from a directory or from the local
Hugging Face cache. This module is the one part of the product that talks to
the hub: for this command, and for ``rag-monitor demo``, which fetches here the models
it lacks (``missing_needs``) when the hub answers (``hub_unreachable``). Each
registered detector says what it needs under the configuration
(``DetectorComponent.models``: repositories at pinned revisions, and which of
their files it reads). They are downloaded into the Hugging Face cache, or under
``--to DIR``; then each detector loads them as it does at run time, and the
configuration lines that point at them are printed on stdout as YAML. Progress
and errors go to stderr; a failure is one line and exit status 1.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any, TextIO

import yaml

from monitor.contract.components import DetectorComponent, ModelNeed, ModelSupport, load_components
from monitor.contract.config import Config

FAILED = 1
# How long a caller that may fetch (the demo) waits to learn whether the hub answers at all:
# long enough for a round trip from anywhere, short enough that an offline start is not held up.
REACH_TIMEOUT_S = 3.0
_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


class FetchError(Exception):
    """A fetch that failed for a reason the user can act on; the message says which."""


def fetch_models(
    config: Config, to: Path | None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Fetch, verify and print the settings for every model ``config``'s detectors read
    (on the process's stdout and stderr of the moment, unless given others)."""
    out, err = out or sys.stdout, err or sys.stderr
    to = None if to is None else to.expanduser().resolve()
    settings: dict[str, dict[str, Any]] = {}
    try:
        for component, section, needs in _plan(config):
            settings[component.name] = _fetch_for(component, section, needs, to, err)
    except FetchError as exc:
        print(f"rag-monitor models fetch: {exc}", file=err)
        return FAILED
    if not settings:
        print("no enabled detector in this configuration reads a model from the hub", file=err)
        return 0
    out.write(config_lines(settings, to))
    return 0


def _plan(config: Config) -> list[tuple[DetectorComponent[Any], Any, Sequence[ModelNeed]]]:
    """Each detector with models to fetch under ``config``, its section and its needs."""
    plan = []
    for component in load_components():
        section = getattr(config.detectors, component.name, None)
        if component.models is None or section is None:
            continue
        try:
            needs = component.models.needs(section)
        except (ImportError, ValueError) as exc:  # a setting that names no fetchable model
            raise FetchError(str(exc)) from exc
        if needs:
            plan.append((component, section, needs))
    return plan


def missing_needs(config: Config) -> list[tuple[str, Sequence[ModelNeed]]]:
    """Per detector that lacks a model it reads (``ModelSupport.missing``), what this
    command would fetch for it: the plan of ``fetch_models``, limited to those detectors.
    FetchError when a setting names no fetchable model."""
    missing = []
    for component, section, needs in _plan(config):
        assert component.models is not None  # _plan keeps the detectors that read models
        if component.models.missing(section):
            missing.append((component.name, needs))
    return missing


def hub_unreachable(timeout_s: float = REACH_TIMEOUT_S) -> str | None:
    """Why nothing can be fetched from the hub now, or None when ``HF_ENDPOINT`` answers.

    ``HF_HUB_OFFLINE`` is honoured without a request. Any HTTP answer counts (a mirror's
    root may well be a 404): what is asked is whether something answers there. The request
    runs in a thread waited on for ``timeout_s`` in all, because the client's timeouts do
    not cover a name lookup, which can hang for much longer on a machine without network.
    """
    if find_spec("huggingface_hub") is None:  # a core install: download() names the extra
        return "the Hugging Face hub client is not installed"
    import requests
    from huggingface_hub import constants, get_session

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    endpoint = constants.ENDPOINT
    answers: list[str | None] = []

    def ask() -> None:
        try:  # the hub client's own session: its proxies and headers, as a download has
            get_session().head(endpoint, timeout=timeout_s, allow_redirects=False)
            answers.append(None)
        except requests.RequestException as exc:
            answers.append(f"cannot reach {endpoint} ({_reason(exc)})")

    # A daemon thread: one stuck in a name lookup must not hold up the process's exit.
    asking = threading.Thread(target=ask, name="hub-reachable", daemon=True)
    asking.start()
    asking.join(timeout_s)
    return answers[0] if answers else f"cannot reach {endpoint} (no answer in {timeout_s:g} s)"


def _fetch_for(
    component: DetectorComponent[Any],
    section: Any,
    needs: Sequence[ModelNeed],
    to: Path | None,
    err: TextIO,
) -> dict[str, Any]:
    """Download one detector's needs, load them as it would, and return its settings
    (nested where a setting is dotted: ``token_classifier.model``)."""
    support: ModelSupport[Any] | None = component.models
    assert support is not None
    update: dict[str, str] = {}
    for need in needs:
        path = download(need, to)
        print(f"fetched {need.repo} at {need.revision} into {path}", file=err)
        if need.setting is not None and to is not None:
            update[need.setting] = str(path)
    checked = section
    for setting, value in update.items():
        checked = _with_setting(checked, setting, value)
    try:
        support.load(checked)
    except Exception as exc:  # whatever loading raises, the user needs one line
        raise FetchError(
            f"detectors.{component.name}: the fetched files do not load: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    print(f"verified detectors.{component.name}: loaded as the sidecar loads it", file=err)
    settings: dict[str, Any] = {}
    for need in needs:
        if need.setting:
            *parents, key = need.setting.split(".")
            value = checked
            for part in need.setting.split("."):
                value = getattr(value, part)
            nested = settings
            for parent in parents:
                nested = nested.setdefault(parent, {})
            nested[key] = str(value)
    return settings


def _with_setting(section: Any, setting: str, value: str) -> Any:
    """A copy of ``section`` with the (dotted) ``setting`` set to ``value``."""
    head, _, rest = setting.partition(".")
    if not rest:
        return section.model_copy(update={head: value})
    return section.model_copy(update={head: _with_setting(getattr(section, head), rest, value)})


def download(need: ModelNeed, to: Path | None) -> Path:
    """The files of ``need`` in the cache (``to`` None) or under ``to``; FetchError says why not."""
    if find_spec("huggingface_hub") is None:  # a core install: the hub client comes with extras
        raise FetchError(
            f"fetching {need.repo} needs the Hugging Face hub client, which the extra of the "
            "model's detector brings: pip install 'rag-monitor[hhem]' (HHEM), "
            "'rag-monitor[token-judge]' (the token classifier) or "
            "'rag-monitor[embedder]' (the drift embedder)"
        )
    import requests
    from huggingface_hub import HfApi, constants, snapshot_download
    from huggingface_hub import errors as hub

    endpoint = constants.ENDPOINT
    if constants.HF_HUB_OFFLINE:
        raise FetchError("HF_HUB_OFFLINE is set: unset it for this command (the sidecar keeps it)")
    where = f"{need.repo} at revision {need.revision}"
    try:
        info = HfApi().model_info(need.repo, revision=need.revision)
        names = {sibling.rfilename for sibling in info.siblings or ()}
        weights = [name for name in need.weights if name in names][:1]
        if need.weights and not weights:
            raise FetchError(f"{where}: the repository holds none of {', '.join(need.weights)}")
        local_dir = None if to is None else to / need.directory
        path = snapshot_download(
            need.repo,
            revision=need.revision,
            allow_patterns=[*need.files, *weights],
            local_dir=local_dir,
        )
    except hub.RevisionNotFoundError as exc:
        raise FetchError(
            f"{endpoint} has no revision {need.revision} of {need.repo}; the pinned commit "
            "is gone or wrong: check the repository's history and update the pin"
        ) from exc
    except hub.RepositoryNotFoundError as exc:  # gated and private repositories too
        raise FetchError(
            f"{endpoint} has no repository {need.repo} this client may read "
            "(a private or gated one needs HF_TOKEN)"
        ) from exc
    except (requests.ConnectionError, requests.Timeout, hub.LocalEntryNotFoundError) as exc:
        raise FetchError(
            f"cannot reach {endpoint} ({_reason(exc)}); run this where the hub is reachable "
            "(or set HF_ENDPOINT to a mirror) and copy the result to this machine"
        ) from exc
    except hub.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "no response"
        raise FetchError(f"{where}: {endpoint} answered {status}") from exc
    except OSError as exc:
        if exc.errno is None:  # e.g. a download cut short: its size did not match
            raise FetchError(f"{where}: download failed: {exc}") from exc
        target = to if to is not None else constants.HF_HUB_CACHE
        raise FetchError(f"cannot write under {target}: {exc.strerror}") from exc
    return Path(path)


def _reason(exc: BaseException) -> str:
    """The operating system's words for a connection failure, if they are in the chain."""
    current: BaseException | None = exc
    while current is not None:
        found = _ERRNO_TEXT.search(str(current))
        if found:
            return found.group(1).strip()
        current = current.__cause__ or current.__context__
    return type(exc).__name__


def config_lines(settings: dict[str, dict[str, Any]], to: Path | None) -> str:
    """The YAML to merge into the sidecar's configuration, with a comment on where it reads."""
    from huggingface_hub import constants

    where = (
        f"# the models are under {to}: ship that directory with the sidecar at the same path"
        if to is not None
        else f"# read from the Hugging Face cache {constants.HF_HUB_CACHE}: ship it with the "
        "sidecar and set HF_HUB_CACHE there if it moves"
    )
    body = yaml.safe_dump({"detectors": settings}, sort_keys=False, default_flow_style=False)
    return f"{where}\n{body}"

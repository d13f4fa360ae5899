"""The ``rag-monitor`` command line. Imports stay inside the verbs so that
``--help`` answers at once: torch, transformers, alibi-detect and phoenix are
loaded only by the detector that needs them.

``run``, ``check-config`` and ``models fetch`` are the core's; every other verb is a
registered ``Command`` (``monitor/contract/components.py``): ``rules`` and ``dashboard``
from ``alerts``, ``report drift`` and ``drift set-reference`` from the drift
detector's component.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from monitor.contract.command import Command

NOT_AVAILABLE = 2
_Parsers = argparse._SubParsersAction  # the type add_subparsers returns


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, registered commands included (the docs site's CLI reference
    is generated from it)."""
    parser = argparse.ArgumentParser(
        prog="rag-monitor",
        description="Online production monitoring sidecar for RAG services.",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = verbs.add_parser(name, help=help_text, description=help_text)
        sub.add_argument("--config", type=Path, help="YAML configuration (default: built-in)")
        return sub

    verb("run", "run the sidecar: OTLP receivers, Kafka consumer, /metrics")
    _add_models(verbs)
    _add_registered_commands(verbs)
    check = verbs.add_parser("check-config", help="validate a configuration file and explain it")
    check.add_argument("file", type=Path, nargs="?", help="YAML file (omitted: the defaults)")
    check.add_argument("--explain", action="store_true", help="list every key with its meaning")
    return parser


def _add_models(verbs: _Parsers[argparse.ArgumentParser]) -> None:
    """``rag-monitor models fetch [--config FILE] [--to DIR]``."""
    models = verbs.add_parser("models", help="models: fetch", description="models: fetch")
    actions = models.add_subparsers(dest="action", required=True, metavar="ACTION")
    text = (
        "download the pinned models the configured detectors read (HHEM and its tokenizer, "
        "the drift embedder when set), load them as the sidecar does, print the config lines"
    )
    fetch = actions.add_parser("fetch", help=text, description=text)
    fetch.add_argument("--config", type=Path, help="YAML configuration (default: built-in)")
    fetch.add_argument(
        "--to", type=Path, metavar="DIR", help="into DIR instead of the Hugging Face cache"
    )


def _add_registered_commands(verbs: _Parsers[argparse.ArgumentParser]) -> None:
    """``rag-monitor <verb> [<action>] ...`` for each registered command."""
    from monitor.contract.command import load_commands

    by_verb: dict[str, list[Command]] = {}
    for command in load_commands():
        by_verb.setdefault(command.words[0], []).append(command)
    for verb, commands in by_verb.items():
        if len(commands) == 1 and len(commands[0].words) == 1:
            _add_command(verbs, verb, commands[0])
            continue
        actions = ", ".join(command.words[-1] for command in commands)
        text = f"{verb}: {actions}"
        parser = verbs.add_parser(verb, help=text, description=text)
        actions_parser = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        for command in commands:
            _add_command(actions_parser, command.words[-1], command)


def _add_command(parsers: _Parsers[argparse.ArgumentParser], name: str, command: Command) -> None:
    parser = parsers.add_parser(name, help=command.help, description=command.help)
    parser.add_argument("--config", type=Path, help="YAML configuration (default: built-in)")
    command.arguments(parser)
    parser.set_defaults(command=command)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verb == "check-config":
        return _check_config(args.file, args.explain)
    from monitor.runtime.log import configure_logging

    configure_logging(args.log_level)
    if args.verb == "run":
        return _run(args.config)
    if args.verb == "models":
        return _fetch_models(args.config, args.to)
    if "command" in args:
        return _registered(args.config, args.command, args)
    print(
        f"rag-monitor {args.verb}: not available yet in this version",
        file=sys.stderr,
    )
    return NOT_AVAILABLE


def _load(path: Path | None) -> object:
    from monitor.runtime.config_loading import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as exc:
        print(f"invalid configuration ({exc.source}):", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def _registered(path: Path | None, command: Command, args: argparse.Namespace) -> int:
    from monitor.contract.config import Config

    config = _load(path)
    if not isinstance(config, Config):
        return 1
    return command.run(args, config)


def _fetch_models(path: Path | None, to: Path | None) -> int:
    from monitor.contract.config import Config
    from monitor.runtime.models import fetch_models

    config = _load(path)
    if not isinstance(config, Config):
        return 1
    return fetch_models(config, to)


def _check_config(path: Path | None, explain_keys: bool) -> int:
    from monitor.contract.config import Config, require_extras
    from monitor.contract.extras import MissingExtraError
    from monitor.runtime.config_loading import explain

    config = _load(path)
    if not isinstance(config, Config):
        return 1
    try:
        require_extras(config)
    except MissingExtraError as exc:  # the start refuses it with the same line
        print(f"invalid configuration: {exc}", file=sys.stderr)
        return 1
    print(f"{path or 'defaults'}: valid")
    if explain_keys:
        for line in explain():
            print(f"  {line}")
    return 0


def _run(path: Path | None) -> int:
    from monitor.contract.config import Config
    from monitor.runtime.sidecar import Sidecar

    config = _load(path)
    if not isinstance(config, Config):
        return 1
    try:
        sidecar = Sidecar(config)
    except ValueError as exc:  # a setting that only fails when used (e.g. unset token variable)
        print(f"invalid configuration: {exc}", file=sys.stderr)
        return 1
    sidecar.run_until_signal()
    return 0

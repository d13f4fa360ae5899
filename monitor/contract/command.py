"""``rag-monitor`` commands: what a package registers under the entry-point group
``rag_monitor.commands``, and the registered ones.

A command is given the validated root configuration, which is assembled from the
registered components (``monitor/contract/config.py``): so commands are registered beside
the components, not by them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from monitor.contract.config import Config
    from monitor.contract.sidecar_registry import SidecarRegistry

COMMAND_GROUP = "rag_monitor.commands"


@dataclass(frozen=True)
class Command:
    """A ``rag-monitor`` command: ``("rules",)`` or a verb and action, ``("report", "drift")``.

    A package registers one per entry point in ``rag_monitor.commands`` (entry name: the
    words joined by ``.``), a detector its own beside its component. ``arguments`` adds
    its options to the parser (``--config`` is already there); ``run`` gets the parsed
    arguments and the validated root ``Config`` and returns the exit code. Only ``run``
    of the chosen command is called after parsing, so heavy imports belong inside it. A
    command whose process serves its own ``/metrics`` (the scorer) gives ``metrics``:
    given the root ``Config`` and a registry, it declares there what the process
    declares before it loads anything, without starting it, so that the metrics
    reference lists that role's families with the sidecar's.
    """

    words: tuple[str] | tuple[str, str]
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Config], int]
    metrics: Callable[[Config, SidecarRegistry], None] | None = None
    # The detector whose families ``metrics`` declares (the metrics reference lists them
    # under it); None for the core's.
    detector: str | None = None


def load_commands() -> list[Command]:
    """The registered commands, by entry-point name; fails naming a bad entry point."""
    commands = []
    for entry in sorted(entry_points(group=COMMAND_GROUP), key=lambda entry: entry.name):
        command = entry.load()
        if not isinstance(command, Command) or ".".join(command.words) != entry.name:
            raise TypeError(
                f"entry point {entry.name} = {entry.value} in {COMMAND_GROUP} must be a "
                f"Command with the words {entry.name.split('.')}"
            )
        commands.append(command)
    return commands

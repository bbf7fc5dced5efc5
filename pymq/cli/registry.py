"""The sub-command registry of ``pymq``: ``@command`` adds a handler; constants."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import NamedTuple

DEFAULT_STORE = os.path.join("~", "store")
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130

Handler = Callable[[argparse.Namespace], int]


class _Command(NamedTuple):
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Handler


_COMMANDS: dict[str, _Command] = {}


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None]
            ) -> Callable[[Handler], Handler]:
    """Register the decorated ``handler(args) -> exit code`` as sub-command ``name``."""

    def register(handler: Handler) -> Handler:
        _COMMANDS[name] = _Command(help, add_arguments, handler)
        return handler

    return register

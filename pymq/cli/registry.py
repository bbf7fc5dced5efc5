"""The sub-command registry of ``pymq``: ``@command`` adds a handler; exit codes."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import NamedTuple

DEFAULT_STORE = os.path.join("~", "store")
#: a query found nothing (no message, topic, queue or offset matched); check: damage found
EXIT_NOT_FOUND = 1
#: a bad argument, no store, a store error: one line on stderr, no traceback
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
#: the reader of standard output went away (``| head``): quiet, as a tool killed by SIGPIPE
EXIT_BROKEN_PIPE = 128 + 13

#: the exit-code rule of every query, in ``pymq --help`` and each query's help
QUERY_EXIT_RULE = ("exit status: 0 when something was found, 1 when the query found nothing (a note says so, "
                   "or --json prints an empty value), 2 on a bad argument or no store (one line on stderr)")

Handler = Callable[[argparse.Namespace], int]


class _Command(NamedTuple):
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Handler
    query: bool


_COMMANDS: dict[str, _Command] = {}


def command(name: str, help: str, add_arguments: Callable[[argparse.ArgumentParser], None], query: bool = False
            ) -> Callable[[Handler], Handler]:
    """Register the decorated ``handler(args) -> exit code`` as sub-command ``name``;
    ``query``: it looks something up, and returns :data:`EXIT_NOT_FOUND` when it finds
    nothing (its help says so)."""

    def register(handler: Handler) -> Handler:
        _COMMANDS[name] = _Command(help, add_arguments, handler, query)
        return handler

    return register

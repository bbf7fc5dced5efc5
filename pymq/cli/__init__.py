"""``pymq``: command-line tools over a store directory, in the spirit of RocketMQ's mqadmin.

Usage::

    pymq [--store DIR] COMMAND [options]      # also: python -m pymq ...

``--store`` defaults to ``~/store``, RocketMQ's default ``storePathRootDir``.

Sub-commands
------------
``bench``
    The benchmark of :mod:`pymq.benchmark` on temporary stores, side by side with peers
    (``--store`` is not used; ``--dir`` picks where the temporary stores go).
``check [--json]``
    Verify a store without changing it: records and CRCs, holes in the log (with the
    records they took), consume queues against the log, index chains, side files. Exit
    code 1 when damage was found; it never stops at damage, and beside a running writer it
    checks what the writer had written (see :mod:`pymq.cli.check`).
``topic-list``, ``topic-status -t TOPIC``
    Topics; per queue of a topic its min and max offset and last update (mqadmin's
    topicList / topicStatus).
``query-msg-by-key -t TOPIC -k KEY``, ``query-msg-by-id -i MSGID``,
``query-msg-by-offset -t TOPIC -q QID -o OFFSET``
    Find messages by business key or unique key, offset message id, or queue offset.
``print-msg -t TOPIC [-q QID] [-b BEGIN] [-e END]``
    Print the messages of a topic (or queue), optionally only those stored between BEGIN
    and END (ms, or ``yyyy-MM-dd#HH:mm:ss:SSS``).
``consumer-progress -g GROUP [-t TOPIC]``
    Per queue: broker offset, the group's offset and the difference.
``stats [--json] [--sample S]``, ``top [--interval S]``
    What the store is doing: put and get rates, offsets, consumer lag, disk and cleaning
    thresholds, pending delayed and timer messages (``store.stats()``), once or live.
``resend-dlq -g GROUP (-i MSGID | --all)``
    Give a group's dead letters another round through its retry topic.
``serve [--port 8081] [--host 127.0.0.1] ...``
    Serve the store to RocketMQ 5 clients over gRPC (see docs/server.md).
``delete-topic -t TOPIC``, ``clean-expired [--reserved-hours H] [--force]``
    Delete a topic; delete expired commit-log files now (mqadmin's deleteTopic and
    deleteExpiredCommitLog). These open the store for writing, so no writer may hold it.

Every query command opens the store read-only (no lock: it works on a live store); every
store command takes ``--json`` for output that scripts can read.

Adding a sub-command: write ``cmd_<name>(args) -> int`` in ``queries`` (reads) or
``maintenance`` (writes, serving) and decorate it with :func:`command`, passing a function
that adds the sub-command's own arguments.

Exit codes: 0 success, 2 usage errors and pymq errors (:class:`pymq.PymqError`, or an
``OSError`` such as a missing directory), reported as one line on stderr without a
traceback; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import pymq

from . import queries, check, maintenance, monitor  # noqa: F401,I001  (they register their sub-commands, in this order)
from .registry import _COMMANDS, DEFAULT_STORE, EXIT_ERROR, EXIT_INTERRUPTED, command

__all__ = ["build_parser", "command", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``pymq`` argument parser with every registered sub-command."""
    parser = argparse.ArgumentParser(prog="pymq", description=__doc__.splitlines()[0])
    parser.add_argument("--store", default=DEFAULT_STORE, metavar="DIR",
                        help=f"store root directory (default {DEFAULT_STORE})")
    parser.add_argument("--version", action="version",
                        version=f"pymq {getattr(pymq, '__version__', '?')}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in _COMMANDS.items():
        sub = subparsers.add_parser(name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(sub)
        sub.set_defaults(handler=cmd.handler)
    return parser


def _fail(command_name: str, message: object, code: int = EXIT_ERROR) -> int:
    print(f"pymq {command_name}: error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pymq`` command line on ``argv`` (``sys.argv[1:]`` when None); the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    args.store = os.path.expanduser(args.store)
    try:
        return args.handler(args)
    except (pymq.PymqError, OSError) as exc:
        return _fail(args.command, exc)
    except KeyboardInterrupt:
        return _fail(args.command, "interrupted", EXIT_INTERRUPTED)

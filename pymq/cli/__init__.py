"""``pymq``: command-line tools over a store directory, in the spirit of RocketMQ's mqadmin.

Usage::

    pymq [--store DIR] COMMAND [options]      # also: python -m pymq ...
    pymq COMMAND [options] --store DIR        # --store goes before or after the sub-command

``--store`` defaults to ``$PYMQ_STORE``, else ``~/store`` (RocketMQ's default
``storePathRootDir``).

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
store command takes ``--json`` for output that scripts can read. Text output fits the
terminal (80 columns when piped; see :mod:`.layout`).

Adding a sub-command: write ``cmd_<name>(args) -> int`` in ``queries`` (reads) or
``maintenance`` (writes, serving) and decorate it with :func:`command`, passing a function
that adds the sub-command's own arguments (typed with :mod:`.arguments`, so bad text is a
usage error) and ``query=True`` for a look-up, which returns 1 when it finds nothing.
``--store`` is added to it; ``tests/cli/test_cli_fuzz.py`` tries it with bad arguments.

Exit codes (the epilog of ``pymq --help``): 0 success; 1 when a query found nothing
(every query command: ``topic-list``, ``topic-status``, ``query-msg-*``, ``print-msg``,
``consumer-progress``), or ``check`` found damage; 2 for a bad argument, a missing store and
pymq errors (:class:`pymq.PymqError`, an ``OSError``), reported as one line on stderr
without a traceback (``PYMQ_DEBUG=1`` shows the traceback of an unexpected error); 130 when
interrupted; 141 (128 + SIGPIPE, printing nothing) when the reader of the output went away,
as in ``pymq print-msg -t T | head``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import pymq

from . import queries, check, maintenance, monitor  # noqa: F401,I001  (they register their sub-commands, in this order)
from .registry import (_COMMANDS, DEFAULT_STORE, EXIT_BROKEN_PIPE, EXIT_ERROR, EXIT_INTERRUPTED, QUERY_EXIT_RULE,
                       command)

__all__ = ["build_parser", "command", "main"]

_STORE_HELP = f"store root directory (default $PYMQ_STORE, else {DEFAULT_STORE}); before or after the sub-command"

def _epilog() -> str:
    """The exit codes and the environment, for ``pymq --help``; the query commands are
    the ones registered with ``query=True``."""
    import textwrap

    queries = ", ".join(name for name, cmd in _COMMANDS.items() if cmd.query)
    found_nothing = textwrap.fill(f"a query found nothing ({queries}): a note says so, with --json an empty "
                                  "value; check found damage", 79, initial_indent=" " * 7, subsequent_indent=" " * 7,
                                  break_on_hyphens=False).lstrip()
    return f"""\
exit status:
  0    success
  1    {found_nothing}
  2    a bad argument, no store at --store, a store error: one line on stderr
  130  interrupted
  141  the reader of the output went away (| head): nothing more is printed

environment: PYMQ_STORE (the default --store), COLUMNS (the width of tables and
long lines; free-text columns that do not fit are shortened, then left out),
PYMQ_DEBUG=1 (the traceback of an unexpected error)"""


class UsageError(Exception):
    """A bad command line, as argparse words it (one line)."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as :class:`UsageError`: one line on
    stderr, no usage block, no exit from inside the parser."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    """The ``pymq`` argument parser with every registered sub-command."""
    parser = _Parser(prog="pymq", description=__doc__.splitlines()[0], epilog=_epilog(),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default=None, metavar="DIR", help=_STORE_HELP)
    parser.add_argument("--version", action="version",
                        version=f"pymq {getattr(pymq, '__version__', '?')}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, cmd in _COMMANDS.items():
        sub = subparsers.add_parser(name, help=cmd.help, description=cmd.help,
                                    epilog=QUERY_EXIT_RULE if cmd.query else None)
        cmd.add_arguments(sub)
        try:        # also after the sub-command (``serve`` declares its own)
            sub.add_argument("--store", default=argparse.SUPPRESS, metavar="DIR", help=_STORE_HELP)
        except argparse.ArgumentError:
            pass
        sub.set_defaults(handler=cmd.handler)
    return parser


def _store_dir(args: argparse.Namespace) -> str:
    given = getattr(args, "store", None)
    if given is not None and not given.strip():
        raise UsageError(f"pymq {args.command}: error: --store is empty")
    store = given or os.environ.get("PYMQ_STORE", "").strip() or DEFAULT_STORE
    return os.path.expanduser(store)


def _fail(command_name: str, message: object, code: int = EXIT_ERROR) -> int:
    text = " ".join(str(message).split()) or type(message).__name__
    text = text.removeprefix(f"{command_name}: ")        # "pymq serve: error: serve: ..." once
    print(f"pymq {command_name}: error: {text}", file=sys.stderr)
    return code


def _outputs_never_raise() -> None:
    """Text the terminal's encoding cannot show (a topic passed as bytes that are not
    UTF-8) is escaped, not an exception."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):
            pass


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null, so the flush at exit finds no pipe
    to complain about."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``pymq`` command line on ``argv`` (``sys.argv[1:]`` when None); the exit code."""
    _outputs_never_raise()
    try:
        code = _run(argv)
        sys.stdout.flush()          # a closed pipe shows here, not in the flush at exit
        return code
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        args.store = _store_dir(args)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return EXIT_ERROR
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_ERROR
    try:
        return args.handler(args)
    except BrokenPipeError:
        raise
    except UnicodeEncodeError as exc:          # argv bytes that are not UTF-8, passed on to the store
        return _fail(args.command, f"not UTF-8 text: {exc.object[exc.start:exc.end]!r} in {exc.object!r}")
    except (pymq.PymqError, OSError, ValueError, OverflowError, UnicodeError) as exc:
        return _fail(args.command, exc)
    except KeyboardInterrupt:
        return _fail(args.command, "interrupted", EXIT_INTERRUPTED)
    except Exception as exc:
        if os.environ.get("PYMQ_DEBUG"):
            raise
        return _fail(args.command, f"internal error: {type(exc).__name__}: {exc} (PYMQ_DEBUG=1 shows the traceback)")

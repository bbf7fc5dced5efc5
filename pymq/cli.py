"""``pymq``: command-line tools over a store directory, in the spirit of RocketMQ's mqadmin.

Usage::

    pymq [--store DIR] COMMAND [options]      # also: python -m pymq ...

``--store`` defaults to ``~/store``, RocketMQ's default ``storePathRootDir``.

Sub-commands
------------
``bench``
    The benchmark of :mod:`pymq.benchmark` on temporary stores, side by side with peers
    (``--store`` is not used; ``--dir`` picks where the temporary stores go).
``check``
    Verify a store without changing it: records and CRCs, consume queues against the log,
    index chains. Exit code 1 when damage was found.

Adding a sub-command: write ``cmd_<name>(args) -> int`` and decorate it with
:func:`command`, passing a function that adds the sub-command's own arguments.

Exit codes: 0 success, 2 usage errors and pymq errors (:class:`pymq.PymqError`, or an
``OSError`` such as a missing directory), reported as one line on stderr without a
traceback; 130 when interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

import pymq
from pymq import benchmark

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


# -- sub-commands ------------------------------------------------------------------------


@command("bench", "write throughput of pymq and its peers on temporary stores",
         benchmark.add_arguments)
def cmd_bench(args: argparse.Namespace) -> int:
    """Run :mod:`pymq.benchmark` with the parsed options."""
    return benchmark.main(benchmark.options_from_args(args))


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--index-hash-slots", type=int, default=None, metavar="N",
                        help="index slots per file, for stores that did not record their sizes")
    parser.add_argument("--index-max-entries", type=int, default=None, metavar="N",
                        help="index entries per file, for stores that did not record their sizes")


@command("check", "verify a store (records, CRCs, consume queues, index) without changing it",
         _check_arguments)
def cmd_check(args: argparse.Namespace) -> int:
    """Run :class:`pymq.store.checker.StoreChecker`; 0 when clean, 1 when damaged."""
    import json

    from pymq.store.checker import StoreChecker, infer_config

    cfg = infer_config(args.store)
    if args.index_hash_slots:
        cfg.index_hash_slots = args.index_hash_slots
    if args.index_max_entries:
        cfg.index_max_entries = args.index_max_entries
    tty = sys.stderr.isatty() and not args.json

    def progress(stage: str, done: int, total: int) -> None:
        if tty:
            print(f"\rchecking {stage}: {done + 1}/{total}", end="", file=sys.stderr, flush=True)

    report = StoreChecker(args.store, cfg, progress).run()
    if tty:
        print(file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(f"store      {report.path}")
        print(f"commitlog  {report.segments} segments, {report.records:,} records (CRC checked)")
        print(f"queues     {report.queues} consume queues, {report.queue_entries:,} entries")
        print(f"index      {report.index_files} files, {report.index_entries:,} entries")
        for note in report.notes:
            print(f"note       {note}")
        if report.ok:
            print("result     OK: no damage found")
        else:
            print(f"result     DAMAGED: {len(report.problems)} problem(s)")
            width = max(len(p.kind) + len(p.where) + 3 for p in report.problems)
            for p in report.problems:
                print(f"  {(p.kind + ' ' + p.where).ljust(width)} {p.detail}")
    return 0 if report.ok else 1


# -- plumbing ----------------------------------------------------------------------------


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

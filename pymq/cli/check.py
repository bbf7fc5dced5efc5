"""``pymq check``: verify a store without changing it (:class:`pymq.checker.StoreChecker`).

Exit codes: 0 when nothing is wrong, 1 when the report holds a problem (damage, a hole in
the log, a side file an open would reset or refuse), 2 when there is nothing to check
(no store at ``--store``). It never stops at damage: the report is printed whatever the
check met. With ``--json`` the output is one JSON object in every case: the report
(``ok``, ``problems``, ``holes``, counts and notes), or ``{"ok": false, "error": ...}``
when there was nothing to check.
"""

from __future__ import annotations

import argparse
import json
import sys

import pymq

from .arguments import INT32_MAX, bounded_int
from .layout import wrap_line
from .registry import EXIT_ERROR, command


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--index-hash-slots", type=bounded_int(1, INT32_MAX), default=None, metavar="N",
                        help="index slots per file, for stores that did not record their sizes")
    parser.add_argument("--index-max-entries", type=bounded_int(1, INT32_MAX), default=None, metavar="N",
                        help="index entries per file, for stores that did not record their sizes")


@command("check", "verify a store (records, CRCs, holes, consume queues, index, side files) without "
         "changing it", _check_arguments)
def cmd_check(args: argparse.Namespace) -> int:
    """Run :class:`pymq.checker.StoreChecker`; 0 when clean, 1 when damaged."""
    from pymq.checker import StoreChecker, infer_config

    tty = sys.stderr.isatty() and not args.json

    def progress(stage: str, done: int, total: int) -> None:
        if tty:
            print(f"\rchecking {stage}: {done + 1}/{total}", end="", file=sys.stderr, flush=True)

    try:
        cfg = infer_config(args.store)
        if args.index_hash_slots:
            cfg.index_hash_slots = args.index_hash_slots
        if args.index_max_entries:
            cfg.index_max_entries = args.index_max_entries
        report = StoreChecker(args.store, cfg, progress).run()
    except (pymq.PymqError, OSError) as e:          # nothing to check: no store there
        if not args.json:
            raise
        print(json.dumps({"path": args.store, "ok": False, "error": str(e)}, indent=1))
        print(f"pymq check: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if tty:
            print(file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_json(), indent=1, default=str))
    else:
        _print_report(report)
    return 0 if report.ok else 1


def _print_report(report) -> None:
    def line(text: str, indent: int = 11) -> None:
        print(wrap_line(text, indent))

    print(f"store      {report.path}")
    print(f"commitlog  {report.segments} segments from offset {max(report.min_commitlog_offset, 0):,}, "
          f"{report.records:,} records (CRC checked)")
    print(f"queues     {report.queues} consume queues, {report.queue_entries:,} entries")
    print(f"index      {report.index_files} files, {report.index_entries:,} entries")
    for hole in report.holes:
        line(f"hole       {hole.start:,}..{hole.end:,} ({hole.size:,} bytes) in {hole.segment}: "
             f"{hole.records:,} record(s) lost")
    for note in report.notes:
        line(f"note       {note}")
    if report.ok:
        print("result     OK: no damage found")
        return
    print(f"result     DAMAGED: {len(report.problems)} problem(s)")
    width = max(len(p.kind) + len(p.where) + 3 for p in report.problems)
    for p in report.problems:
        line(f"  {(p.kind + ' ' + p.where).ljust(width)} {p.detail}", min(width + 3, 24))

"""``pymq`` sub-commands that read a store (opened read-only, so they work on a live
store), and ``bench``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import pymq
from pymq import admin, benchmark

from .arguments import INT32_MAX, INT64_MAX, bounded_int, non_empty, time_ms
from .layout import fit_table, wrap_line
from .registry import EXIT_NOT_FOUND, command

# -- sub-commands ------------------------------------------------------------------------


@command("bench", "write throughput of pymq and its peers on temporary stores",
         benchmark.add_arguments)
def cmd_bench(args: argparse.Namespace) -> int:
    """Run :mod:`pymq.benchmark` with the parsed options."""
    return benchmark.main(benchmark.options_from_args(args))


# -- store queries (read-only) -----------------------------------------------------------


def _open_store(args: argparse.Namespace):
    if not os.path.isdir(os.path.join(args.store, "commitlog")):
        raise pymq.PymqError(f"no store at {args.store} (no commitlog/ directory); pass --store DIR")
    return pymq.MessageStore(args.store, read_only=True)


def _table(headers: Sequence[str], rows: Sequence[Sequence[object]], flexible: Sequence[int] = ()) -> str:
    """Left-aligned columns, mqadmin style (``#Header``), fitted to the output's width
    (:func:`.layout.fit_table`; the ``flexible`` columns give way first)."""
    return fit_table(headers, rows, flexible)


def _nothing(args: argparse.Namespace, empty: object, note: str) -> int:
    """A query that found nothing: the note (or, with ``--json``, the empty value) on
    stdout, and :data:`EXIT_NOT_FOUND`."""
    _emit(args, empty, note)
    return EXIT_NOT_FOUND


def _emit(args: argparse.Namespace, data: object, text: str) -> None:
    import dataclasses
    import json

    if getattr(args, "json", False):
        def default(o):
            if dataclasses.is_dataclass(o):
                return dataclasses.asdict(o)
            if isinstance(o, bytes):
                return o.hex()
            return str(o)
        print(json.dumps(data, default=default, indent=1, ensure_ascii=False))
    else:
        print(text)


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="JSON output")


def _message_text(m) -> str:
    d = admin.message_dict(m)
    lines = [f"{k.replace('_', ' ').title():<18} {v}" for k, v in d.items() if k not in ("properties", "body")]
    lines.append(f"{'Properties':<18} {d['properties']}")
    lines.append(f"{'Body':<18} {d['body']}")
    return "\n".join(wrap_line(line, 19) for line in lines)


def _messages_out(args: argparse.Namespace, msgs: list) -> None:
    rows = [(m.msg_id, m.queue_id, m.queue_offset, admin.format_time(m.store_timestamp), m.tags or "",
             " ".join(m.keys or []), repr(m.body[:40])) for m in msgs]
    _emit(args, [admin.message_dict(m) for m in msgs],
          _table(["Message ID", "QID", "Offset", "Store Time", "Tags", "Keys", "Body"], rows, flexible=(6, 5, 4)))


@command("topic-list", "list the topics of a store", _json_flag, query=True)
def cmd_topic_list(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        topics = sorted(set(admin.topic_list(store)) | _configured_topics(args.store))
    if not topics:
        return _nothing(args, [], f"no topic in {args.store}")
    width = max((len(t) for t in topics), default=0)
    _emit(args, topics, "\n".join(f"{t.ljust(width)}  ({admin.topic_kind(t)})" if admin.topic_kind(t) else t
                                   for t in topics))
    return 0


def _configured_topics(store_dir: str) -> set[str]:
    """Topics a broker created in ``config/topics.json`` (a retry topic before its first
    message arrives there, a topic made by ``updateTopic``), read without changing it."""
    from pymq.broker import BrokerConfig
    from pymq.broker.topic_config import TopicConfigManager
    table = TopicConfigManager(store_dir, BrokerConfig())
    table.read_only = True
    table.load()
    return set(table.topics())


def _topic_arg(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("-t", "--topic", type=non_empty, required=required, help="topic name")
    _json_flag(parser)


@command("topic-status", "min offset, max offset and last update of every queue of a topic", _topic_arg,
         query=True)
def cmd_topic_status(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        rows = admin.topic_status(store, args.topic)
    if not rows:
        return _nothing(args, [], f"topic {args.topic!r} has no queue in {args.store}")
    broker = os.path.basename(os.path.normpath(args.store))
    _emit(args, rows, _table(["Broker Name", "QID", "Min Offset", "Max Offset", "Last Updated"],
                             [(broker, r.queue_id, r.min_offset, r.max_offset, admin.format_time(r.last_updated))
                              for r in rows]))
    return 0


def _key_args(parser: argparse.ArgumentParser) -> None:
    _topic_arg(parser)
    parser.add_argument("-k", "--key", type=non_empty, required=True,
                        help="business key (KEYS) or unique key (UNIQ_KEY)")
    parser.add_argument("-n", "--max-num", type=bounded_int(1, INT32_MAX), default=64,
                        help="at most this many (RocketMQ caps at 64)")
    parser.add_argument("-b", "--begin", type=time_ms, default=0,
                        help="stored at or after (ms or yyyy-MM-dd#HH:mm:ss:SSS)")
    parser.add_argument("-e", "--end", type=time_ms, default=None, help="stored at or before")


@command("query-msg-by-key", "messages of a topic whose key or unique key is KEY (newest first)", _key_args,
         query=True)
def cmd_query_msg_by_key(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        msgs = store.query_message(args.topic, args.key, args.max_num, args.begin, args.end)
        if not msgs:
            return _nothing(args, [], "no message found")
        _messages_out(args, msgs)
    return 0


def _id_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-i", "--msg-id", type=non_empty, required=True,
                        help="offset message id (32 or 56 hex digits), or a unique key (a RocketMQ 5 message id)")
    _json_flag(parser)


def _find_by_unique_key(store, key: str):
    for topic in store.get_topics():
        for m in store.query_message(topic, key, 64):
            if m.properties.get("UNIQ_KEY") == key:
                return m
    return None


@command("query-msg-by-id", "the message with an offset message id (or a unique key)", _id_args, query=True)
def cmd_query_msg_by_id(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        try:
            m = store.view_message_by_id(args.msg_id)
            well_formed = True
        except ValueError:
            m, well_formed = None, False
        if m is None:
            # not an offset id: a unique key (UNIQ_KEY, the message id RocketMQ 5 clients get)
            m = _find_by_unique_key(store, args.msg_id)
        if m is None:
            if not well_formed:
                raise pymq.PymqError(f"not a message id: {args.msg_id!r} is no offset message id "
                                     f"(32 or 56 hex digits) and no message's unique key in {args.store}")
            return _nothing(args, None, f"no message at that id: no record starts where {args.msg_id} points "
                                        f"in {args.store}, and no message has it as unique key")
        _emit(args, admin.message_dict(m), _message_text(m))
    return 0


def _offset_args(parser: argparse.ArgumentParser) -> None:
    _topic_arg(parser)
    parser.add_argument("-q", "--queue-id", type=bounded_int(0, INT32_MAX), required=True, help="queue id")
    parser.add_argument("-o", "--offset", type=bounded_int(0, INT64_MAX), required=True, help="queue offset")


@command("query-msg-by-offset", "the message at a queue offset", _offset_args, query=True)
def cmd_query_msg_by_offset(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        r = store.get_message("pymq-admin", args.topic, args.queue_id, args.offset, 1)
        if not r.messages:
            return _nothing(args, None, f"no message at {args.topic}/{args.queue_id} offset {args.offset} "
                                        f"({r.status}; queue offsets {r.min_offset}..{r.max_offset - 1})")
        _emit(args, admin.message_dict(r.messages[0]), _message_text(r.messages[0]))
    return 0


def _print_args(parser: argparse.ArgumentParser) -> None:
    _topic_arg(parser)
    parser.add_argument("-q", "--queue-id", type=bounded_int(0, INT32_MAX), default=None,
                        help="one queue (default: all)")
    parser.add_argument("-b", "--begin", type=time_ms, default=None,
                        help="stored at or after (ms or yyyy-MM-dd#HH:mm:ss:SSS)")
    parser.add_argument("-e", "--end", type=time_ms, default=None, help="stored at or before")
    parser.add_argument("--body", choices=("repr", "text", "hex"), default="repr", help="how to show bodies")


@command("print-msg", "print the messages of a topic or queue, optionally in a time range", _print_args,
         query=True)
def cmd_print_msg(args: argparse.Namespace) -> int:
    import json

    begin, end = args.begin, args.end
    tty = sys.stderr.isatty()

    def progress(qid: int, done: int, total: int) -> None:
        if tty and total > 1000:
            print(f"\rqueue {qid}: {done}/{total}", end="", file=sys.stderr, flush=True)

    with _open_store(args) as store:
        qids = None if args.queue_id is None else [args.queue_id]
        n = 0
        for m in admin.iter_messages(store, args.topic, qids, begin, end, progress):
            d = admin.message_dict(m, args.body)
            if args.json:
                print(json.dumps(d, ensure_ascii=False, default=str))
            else:
                print(f"MSGID: {d['msg_id']} QID: {m.queue_id} OFFSET: {m.queue_offset} "
                      f"STORE: {admin.format_time(m.store_timestamp)} TAGS: {m.tags or ''} "
                      f"KEYS: {' '.join(m.keys or [])} BODY: {d['body']}")
            n += 1
    if tty:
        print(file=sys.stderr)
    if not n:
        return _nothing(args, None, "no message found") if not args.json else EXIT_NOT_FOUND
    return 0


def _progress_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-g", "--group", type=non_empty, required=True, help="consumer group")
    _topic_arg(parser, required=False)


@command("consumer-progress", "per queue: broker offset, consumer offset and lag of a group", _progress_args,
         query=True)
def cmd_consumer_progress(args: argparse.Namespace) -> int:
    with _open_store(args) as store:
        rows = admin.consumer_progress(store, args.group, args.topic)
    total = sum(r.diff for r in rows)
    if not rows:
        where = f" on topic {args.topic!r}" if args.topic else ""
        return _nothing(args, {"group": args.group, "queues": [], "diff_total": 0},
                        f"group {args.group!r} has no committed offsets{where}")
    text = _table(["Topic", "QID", "Broker Offset", "Consumer Offset", "Diff"],
                  [(r.topic, r.queue_id, r.broker_offset, r.consumer_offset, r.diff) for r in rows])
    _emit(args, {"group": args.group, "queues": rows, "diff_total": total}, text + f"\n\nDiff Total: {total}")
    return 0

"""``pymq`` sub-commands that change a store or serve it: they open it for writing, so
no other writer may hold it."""

from __future__ import annotations

import argparse
import os

import pymq

from .arguments import bounded_float, non_empty
from .queries import _emit, _json_flag, _table, _topic_arg
from .registry import command

# -- maintenance (opens the store for writing: the writer's lock must be free) ------------


def _open_writer(args: argparse.Namespace, **settings):
    """The store opened for writing with the sizes it records (and ``settings``); a live
    writer elsewhere makes this fail with StoreLockedError."""
    from pymq.store_sizes import config_for_store
    if not os.path.isdir(os.path.join(args.store, "commitlog")):
        raise pymq.PymqError(f"{args.store} holds no store (no commitlog/ directory)")
    cfg = config_for_store(args.store)
    for name, value in settings.items():
        setattr(cfg, name, value)
    cfg.validate()
    return pymq.MessageStore(args.store, cfg)


def _clean_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reserved-hours", type=bounded_float(0, 1e6, low_open=True), default=72.0, metavar="H",
                        help="delete commit-log files last written more than H hours ago (default 72, "
                             "RocketMQ's fileReservedTime; fractions allowed)")
    parser.add_argument("--force", action="store_true",
                        help="ignore the age: delete every commit-log file but the one being written")
    _json_flag(parser)


@command("delete-topic", "delete a topic: its queues, consumer offsets and pending deliveries "
         "(mqadmin's deleteTopic)", _topic_arg)
def cmd_delete_topic(args: argparse.Namespace) -> int:
    with _open_writer(args) as store:
        deleted = store.delete_topic(args.topic)
    if not deleted:
        raise pymq.PymqError(f"topic {args.topic!r} has no queue in {args.store}")
    _emit(args, {"topic": args.topic, "deleted": True}, f"topic {args.topic} deleted")
    return 0


@command("clean-expired", "delete expired commit-log files now, and the queue and index files they "
         "leave (mqadmin's deleteExpiredCommitLog)", _clean_arguments)
def cmd_clean_expired(args: argparse.Namespace) -> int:
    if not args.reserved_hours > 0:
        raise pymq.PymqError("--reserved-hours must be positive")
    # --force: the smallest reserve there is (one millisecond)
    hours = 1 / 3_600_000 if args.force else args.reserved_hours
    with _open_writer(args, file_reserved_time=hours) as store:
        # a pass deletes at most delete_files_batch_max segments: pass again until one
        # deletes nothing, so the command does what it says whatever the backlog
        out = store.delete_expired_files()
        while True:
            more = store.delete_expired_files()
            for key in ("commitlog", "consume_queue", "index", "timer_log"):
                out[key] += more[key]
            out["disk_ratio"] = more["disk_ratio"]
            if not any(more[key] for key in ("commitlog", "consume_queue", "index", "timer_log")):
                break
        out["min_commitlog_offset"] = store.get_min_phy_offset()
    _emit(args, out, _table(["Commit Log", "Consume Queue", "Index", "Timer Log", "Min Offset", "Disk Used"],
                            [(out["commitlog"], out["consume_queue"], out["index"], out["timer_log"],
                              out["min_commitlog_offset"],
                              f"{out['disk_ratio']:.1%}" if out["disk_ratio"] is not None else "?")]))
    return 0


def _serve_arguments(parser: argparse.ArgumentParser) -> None:
    from pymq.server import serve
    serve.add_arguments(parser)


@command("serve", "serve the store to RocketMQ clients: 5.x gRPC (8081), 4.x name server (9876) and broker (10911)",
         _serve_arguments)
def cmd_serve(args: argparse.Namespace) -> int:
    """Run :func:`pymq.server.serve.run` (needs the ``server`` extra)."""
    from pymq.server import serve
    return serve.run(args)


def _resend_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-g", "--group", type=non_empty, required=True, help="consumer group")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("-i", "--msg-id", type=non_empty, help="offset message id of one message in %%DLQ%%GROUP")
    which.add_argument("--all", action="store_true", help="every dead letter of the group not resent yet")
    _json_flag(parser)


@command("resend-dlq", "give a group's dead letters another round through its retry topic "
         "(as the dashboard's resend of a DLQ message)", _resend_arguments)
def cmd_resend_dlq(args: argparse.Namespace) -> int:
    from pymq.broker import Broker
    from pymq.store_sizes import config_for_store
    if not os.path.isdir(os.path.join(args.store, "commitlog")):
        raise pymq.PymqError(f"{args.store} holds no store (no commitlog/ directory)")
    with Broker(args.store, config_for_store(args.store)) as broker:
        sent = broker.send_back_service.resend_dead_letters(args.group, args.msg_id)
    rows = [{"dlq_msg_id": mid, "status": r.status.name, "msg_id": r.msg_id} for mid, r in sent]
    _emit(args, rows, _table(["DLQ Message ID", "Status", "New Message ID"],
                             [(r["dlq_msg_id"], r["status"], r["msg_id"]) for r in rows]) if rows
          else "no dead letter to resend")
    return 0 if all(r["status"] == "PUT_OK" for r in rows) else 1

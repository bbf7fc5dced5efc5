"""What a plain ``pymq bench`` runs: the headline workloads, each against its strongest peer.

The default run is meant to finish in about two minutes on a 2-core machine and still
say something a reader can trust, so it runs few workloads, each next to the one peer
that comes closest to pymq in the full run (``--full``), at sizes that keep one round
of all of them near 12 s on a quiet 2-core machine (about 24 s on a busy one), and
repeats them in interleaved rounds (:mod:`.rounds`) so every ratio comes with its
spread. Why these seven (bench/README.md says the same):

``put_message`` vs queuelib
    one message per call, the common producer path; queuelib's ``push`` (one
    ``write(2)``) is the fastest peer: lmdb and sqlite3 pay a transaction per message.
``put_messages`` vs lmdb
    batched writes; lmdb's ``putmulti`` in one transaction per batch is the strongest
    peer (sqlite3's ``executemany`` is several times slower).
``get_message`` vs lmdb
    reading a queue in order, bodies touched; lmdb's cursor is the strongest peer.
``query_message`` vs lmdb
    a lookup by key on the index; lmdb's ``get`` is the strongest peer (sqlite3's
    indexed select is several times slower). Compared by per-call p50.
``real_put_messages`` vs lmdb
    the realistic mixed one: batches of messages with keys while the dispatcher still
    indexes the previous phase's messages (writes, dispatch and indexing at once); the
    row that swung from 0.35x to 1.24x between two best-of-3 runs.
``dispatch_load`` vs pymq-idle
    the same batches with keys while the dispatcher files a backlog of 200,000 keyed
    messages, next to them once it caught up: whether the dispatcher slows the writer
    down (the goal is >= 0.9).
``commit_durable`` vs sqlite3
    durable consumer progress (returns once the offset is on disk): what a consumer
    pays per commit; sqlite3 in WAL mode with ``synchronous=FULL`` is the peer that does
    the same. Compared by per-call p50.

Everything else (variants of pymq, the slow peers persist-queue and litequeue, delivery,
timers, cleaning, aio, many_queues) runs with ``--full`` or ``--workload NAME``.
"""

from __future__ import annotations

from typing import NamedTuple

from .base import BenchOptions, Workload
from .catalogue import WORKLOADS


class Headline(NamedTuple):
    """One headline comparison: a workload group, its peer, and why it is there."""

    group: str
    peer: str
    why: str


HEADLINE: tuple[Headline, ...] = (
    Headline("put_message", "queuelib", "single puts; the fastest peer (lmdb, sqlite3: a txn per message)"),
    Headline("put_messages", "lmdb", "batched puts; putmulti, 1 txn per batch"),
    Headline("get_message", "lmdb", "reading a queue in order; lmdb's cursor"),
    Headline("query_message", "lmdb", "lookup by key; lmdb get (p50 per call)"),
    Headline("real_put_messages", "lmdb", "realistic mix: batches with keys while indexing"),
    Headline("dispatch_load", "pymq-idle", "batches while the dispatcher files a backlog, vs idle"),
    Headline("commit_durable", "sqlite3", "durable consumer offsets; sqlite3 WAL, synchronous=FULL (p50)"),
)

#: Sizes of the default run (``BenchOptions`` fields); ``--full`` and ``--workload`` keep
#: the dataclass defaults, and a size given on the command line wins either way.
HEADLINE_SIZES: dict[str, int] = {
    "messages": 300_000,
    "batch_messages": 1_000_000,
    "queries": 50_000,
    "query_store_size": 200_000,
}
HEADLINE_ROUNDS = 5   # --repeat of the default run
FULL_ROUNDS = 3       # --repeat of --full and --workload runs


def is_headline(options: BenchOptions) -> bool:
    """True when ``options`` ask for the default run (neither ``--full`` nor ``--workload``)."""
    return not options.full and not options.workloads


def select_workloads(options: BenchOptions) -> list[Workload]:
    """Instances of the workloads to run, in output order: the headline pairs by default,
    every implementation of the ``--workload`` groups, or everything with ``--full``."""
    if is_headline(options):
        order = {h.group: i for i, h in enumerate(HEADLINE)}
        wanted = {(h.group, impl) for h in HEADLINE for impl in ("pymq", h.peer)}
        chosen = [cls for cls in WORKLOADS if (cls.group, cls.implementation) in wanted]
        return [cls(options) for cls in sorted(chosen, key=lambda cls: order[cls.group])]
    chosen = set(options.workloads) if options.workloads else None
    return [cls(options) for cls in WORKLOADS if chosen is None or cls.group in chosen]

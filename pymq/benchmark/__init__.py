"""Write throughput of pymq next to embedded peers, measured in one process run.

This module is what ``pymq bench`` (and ``python -m pymq bench``) runs; the pytest-benchmark
suite in the repository's ``bench/`` directory drives the same :class:`Workload` classes.

How a workload is timed
-----------------------
Each repeat starts from a fresh temporary directory: ``Workload.setup`` opens the store,
database or queue there and writes ``--warmup`` messages; ``time.perf_counter_ns`` brackets
one ``Workload.run(n)``, a plain loop that builds every message or record object inside
the loop as a user's code would; ``Workload.check`` verifies the writes and
``Workload.teardown`` closes (final flush, shutdown) and deletes everything, untimed. The
best of ``--repeat`` repeats is reported. The garbage collector stays enabled.

Workload groups; the ratio column is pymq's msgs/s divided by the row's msgs/s
-----------------------------------------------------------------------------------
``put_message``
    pymq ``store.put_message(Message(topic, body))`` per message; lmdb one write
    transaction per message (``txn.put(key, body)``, 8-byte big-endian counter keys);
    queuelib ``FifoDiskQueue.push(body)`` (one ``write(2)`` per push).
``put_messages``
    pymq ``store.put_messages([...])`` per batch of ``--batch`` messages; lmdb one write
    transaction per batch with ``cursor.putmulti(items, append=True)``.
``delivery``, ``put_with_timers``
    delay-level and timer message lateness (p50/p99), and put_message throughput with
    100,000 timers pending; see :mod:`pymq.benchmark.delivery`.
``commit_offset``, ``commit_durable``
    consumer offsets committed in memory (``store.commit_offset``) and durably
    (``Consumer.commit()``, alone and from 8 threads), next to sqlite3 upserts without and
    with fsync; see :mod:`pymq.benchmark.commit`.
``aio_put``, ``aio_sync_put``, ``aio_wakeup``
    :mod:`pymq.aio` next to the threaded API: put rate, SYNC_FLUSH puts from 32
    producers, put-to-wake-up latency (p50/p99); see :mod:`pymq.benchmark.aio`.
``many_queues``
    ``--many-queues`` queues (10,000) x ``--many-queue-messages`` (10): pymq's put rate
    next to lmdb's (one key range per queue), and per implementation the extra figures
    writer reopen s, read-only open s, disk MiB (blocks, as ``du`` counts them) and
    mappings, printed in a table under the main one; see :mod:`pymq.benchmark.many_queues`.

Durability: pymq runs a started store with the default ``StoreConfig`` (1 GiB segments,
``ASYNC_FLUSH``: a put returns once the message is in the mapped commit log); lmdb is
opened with ``sync=False, metasync=False`` (no fsync per commit either); queuelib never
fsyncs. ``--flush-disk-type SYNC_FLUSH`` opens lmdb with ``sync=True, metasync=True``.

Adding a workload: subclass :class:`Workload` (``group``, ``implementation``,
``operation``, ``open``/``run``/``check``/``close``) and append it to :data:`WORKLOADS`.
A workload that measures more than its rate lists a :class:`Figure` per value in
``figures`` and returns the values from ``measure_figures()`` (:mod:`pymq.benchmark.figures`).
"""

from .aio import (PymqAioPut, PymqAioSyncPut, PymqAioWakeup, PymqThreadPut, PymqThreadSyncPut,
                  PymqThreadWakeup)
from .base import TOPIC, PEERS, BenchCheckError, BenchOptions, Workload, store_config
from .figures import Figure, best_figures, format_figures
from .many_queues import LmdbManyQueues, PymqManyQueues
from .read import (BisectTimeLookup, LmdbCursorRead, PymqDispatch, PymqGetMessage, PymqPutMessagesReference,
                   PymqTimeLookup, QueuelibPop)
from .runner import (WORKLOADS, Repeat, Report, Row, add_arguments, assign_ratios, environment, format_report,
                     format_table, groups, main, measure, options_from_args, parse_args, run,
                     run_benchmarks, select_workloads, time_once, time_repeat, write_json)
from .delivery import PymqDelayDelivery, PymqPutWithoutTimers, PymqPutWithTimers, PymqTimerDelivery
from .query import LmdbGet, PymqQueryMessage, SqliteSelect
from .write import LmdbPutMulti, LmdbPutPerTxn, PymqPutMessage, PymqPutMessages, QueuelibPush

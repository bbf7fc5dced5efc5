"""pymq next to embedded peers, measured side by side in one process run.

This module is what ``pymq bench`` (and ``python -m pymq bench``) runs; the pytest-benchmark
suite in the repository's ``bench/`` directory drives the same :class:`Workload` classes.

What runs
---------
A plain ``pymq bench`` runs the headline workloads, each against its strongest peer
(:mod:`pymq.benchmark.headline`: single and batched puts, in-order reads, key lookups,
a realistic mix, durable consumer commits), at sizes that keep the run near two minutes
on a 2-core machine. ``--full`` runs every workload of :data:`WORKLOADS` with every peer
at the full sizes; ``--workload NAME`` runs one group, every implementation of it.

How a workload is timed
-----------------------
Each repeat starts from a fresh temporary directory: ``Workload.setup`` opens the store,
database or queue there and writes ``--warmup`` messages; ``time.perf_counter_ns`` brackets
one ``Workload.run(n)``, a plain loop that builds every message or record object inside
the loop as a user's code would; ``Workload.check`` verifies the writes and
``Workload.teardown`` closes (final flush, shutdown) and deletes everything, untimed. The
garbage collector stays enabled.

Rounds and ratios
-----------------
``--repeat`` rounds (5 by default, 3 with ``--full``) each run every selected workload
once; within a round a group's implementations run next to each other, their order
rotating from round to round (:mod:`pymq.benchmark.rounds`). A peer's ratio is taken per
round, pymq's msgs/s over the peer's (latency workloads: the peer's p50 over pymq's), and
reported as the median with its min-max over the rounds (:mod:`pymq.benchmark.rows`).
Every run prints a table of at most 80 columns and writes a JSON of the figures and a
chart of the ratios (:mod:`pymq.benchmark.output`, :mod:`pymq.benchmark.plot`).

Durability: pymq runs a started store with the default ``StoreConfig`` (1 GiB segments,
``ASYNC_FLUSH``: a put returns once the message is in the mapped commit log); lmdb is
opened with ``sync=False, metasync=False`` (no fsync per commit either); queuelib never
fsyncs; sqlite3 runs WAL with ``synchronous=OFF`` (``FULL`` for durable commits).
``--flush-disk-type SYNC_FLUSH`` opens lmdb with ``sync=True, metasync=True``.

Adding a workload: subclass :class:`Workload` (``group``, ``implementation``,
``operation``, ``open``/``run``/``check``/``close``) and append it to :data:`WORKLOADS`
(:mod:`pymq.benchmark.catalogue`). A workload that measures more than its rate lists a
:class:`Figure` per value in ``figures`` and returns the values from
``measure_figures()`` (:mod:`pymq.benchmark.figures`).
"""

from .aio import (PymqAioPut, PymqAioSyncPut, PymqAioWakeup, PymqThreadPut, PymqThreadSyncPut,
                  PymqThreadWakeup)
from .base import TOPIC, PEERS, BenchCheckError, BenchOptions, Workload, store_config
from .figures import Figure, best_figures, format_figures
from .many_queues import LmdbManyQueues, PymqManyQueues
from .read import (BisectTimeLookup, LmdbCursorRead, PymqDispatch, PymqGetMessage, PymqPutMessagesReference,
                   PymqTimeLookup, QueuelibPop)
from .headline import HEADLINE, HEADLINE_SIZES, Headline
from .runner import (WORKLOADS, Repeat, Report, Row, add_arguments, build_rows, environment, format_report,
                     format_table, groups, main, options_from_args, parse_args, run,
                     run_benchmarks, select_workloads, time_once, time_repeat, write_json)
from .delivery import PymqDelayDelivery, PymqPutWithoutTimers, PymqPutWithTimers, PymqTimerDelivery
from .query import LmdbGet, PymqQueryMessage, SqliteSelect
from .write import LmdbPutMulti, LmdbPutPerTxn, PymqPutMessage, PymqPutMessages, QueuelibPush

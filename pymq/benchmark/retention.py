"""Retention workload: what deleting old segments costs the puts going on meanwhile.

``put_while_cleaning``
    ``put_message`` latency (p50/p99) and throughput on a store whose cleaning service
    deletes old commit-log segments while the timed puts run (``pymq``), next to the same
    store with cleaning off (``pymq-not-cleaning``). Both stores are prefilled with
    ``--cleaning-segments`` full 16 MiB segments (and their queue and index files), aged
    past the reserved time; for the first row, cleaning is switched on just before the
    timed puts (once its first deletion is done), and its passes run every 10 ms, each
    deleting one of those segments (and the queue and index files it leaves) while the
    puts go on; the report's settings line says how many went during the timed puts. The ratio of the second row says what cleaning costs a put (target: none;
    deletion is off the put path: unlink and unmap in the cleaning thread). The timed loop
    records each call's latency, so its msgs/s are below the put_message group's.
"""

from __future__ import annotations

import os
import time

import pymq

from .base import TOPIC, _expect
from .write import PymqPutMessage

SEGMENT = 16 << 20
OTHER_TOPIC = "BenchOld"


def _config(options, cleaning: bool) -> pymq.StoreConfig:
    """Cleaning by age is possible only for the cleaning row, and only once ``before_run``
    opens the delete hours (until then no hour of the day is one)."""
    return pymq.StoreConfig(
        commitlog_file_size=SEGMENT, flush_disk_type=options.flush_disk_type,
        file_reserved_time=0.5 / 3600 if cleaning else 72,
        delete_when="%02d" % ((time.localtime().tm_hour + 12) % 24),
        clean_resource_interval=10, delete_commitlog_files_interval=0, delete_consume_queue_files_interval=0,
        delete_files_batch_max=1, clean_file_forcibly_enable=False)


class PymqPutWhileCleaning(PymqPutMessage):
    """pymq: put_message while the cleaning service deletes the prefilled segments."""

    group = "put_while_cleaning"
    latency = True
    cleaning = True
    sync_before_run = False         # before_run syncs, then starts the cleaning
    deleted_during = 0              # segments deleted during the last repeat's timed puts

    @property
    def operation(self) -> str:   # type: ignore[override]
        what = "cleaning deletes them meanwhile" if self.cleaning else "cleaning off"
        return (f"store.put_message(Message(...)), {self.options.cleaning_segments} old "
                f"{SEGMENT >> 20} MiB segments, {what}")

    def message_count(self) -> int:
        return self.options.cleaning_messages

    def note(self) -> str:
        during = (f"; {self.deleted_during} of the {self.options.cleaning_segments} segments deleted during the "
                  f"last repeat's timed puts" if self.cleaning else "")
        return (f"StoreConfig(commitlog_file_size={SEGMENT:,}, flush_disk_type={self.options.flush_disk_type}, "
                + ("file_reserved_time=0.5 s, cleaning every 10 ms" if self.cleaning else "no cleaning")
                + "), other fields default" + during)

    def open(self, path: str) -> None:
        self.last, self.written = None, 0
        self.deleted_during = self._deleted_before = 0
        self.store = pymq.MessageStore(os.path.join(path, "store"), _config(self.options, self.cleaning))
        self.store.start()

    def prefill(self) -> None:
        store = self.store
        body = b"o" * 1000
        target = self.options.cleaning_segments * SEGMENT
        while store.get_max_phy_offset() < target:
            store.put_messages([pymq.Message(topic=OTHER_TOPIC, body=body, keys=["k"]) for _ in range(500)])
        store.flush()
        deadline = time.monotonic() + 60
        while store.dispatch_behind_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.cleaning:
            time.sleep(0.6)                          # past the reserved time

    def before_run(self, n: int) -> None:
        self.deleted_during = 0
        os.sync()
        if self.cleaning:
            # open the delete hours and let the first deletion happen, so that the others
            # (one per 10 ms pass) fall inside the timed puts
            cleaner = self.store.clean_service.clean_commit_log
            cleaner.delete_hours = frozenset(range(24))
            deadline = time.monotonic() + 5
            while not cleaner.deleted_total and time.monotonic() < deadline:
                time.sleep(0.001)
            self._deleted_before = cleaner.deleted_total

    def run(self, n: int) -> None:
        store, Message, body = self.store, pymq.Message, self.body
        clock = time.perf_counter_ns
        samples = self.samples = []
        append = samples.append
        result = None
        for _ in range(n):
            t0 = clock()
            result = store.put_message(Message(topic=TOPIC, body=body))
            append(clock() - t0)
        self.last = result
        self.written += n
        if self.cleaning:
            self.deleted_during = self.store.clean_service.clean_commit_log.deleted_total - self._deleted_before

    def check(self) -> None:
        super().check()
        if self.cleaning:
            cleaner = self.store.clean_service.clean_commit_log
            deadline = time.monotonic() + 5
            while not cleaner.deleted_total and time.monotonic() < deadline:
                time.sleep(0.01)
            _expect(cleaner.deleted_total > 0, "cleaning deleted no segment")


class PymqPutNotCleaning(PymqPutWhileCleaning):
    """pymq: the same puts on the same prefilled store, cleaning off."""

    implementation = "pymq-not-cleaning"
    cleaning = False

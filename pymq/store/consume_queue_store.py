"""The table of consume queues: ``consumequeue/{topic}/{queueId}`` (RocketMQ's
``consumeQueueTable`` with ``findConsumeQueue`` / ``loadConsumeQueue``). Their files are
mapped on demand, at most ``max_mapped_queue_files`` at once (``map_cache``)."""

from __future__ import annotations

import os
import shutil
import threading
from typing import Optional

from pymq.config import StoreConfig

from .consume_queue import ConsumeQueue
from .header_witness import claimed_elsewhere, header_altered, record_destroyed
from .lmq import is_lmq
from .map_cache import MapCache
from .queue_repair import mark_lost_past


class ConsumeQueueStore:
    """Finds, creates, loads, recovers and flushes the consume queues of a store."""

    def __init__(self, root: str, config: StoreConfig, commit_log, read_only: bool = False) -> None:
        self.root = root
        self.config = config
        self.commit_log = commit_log
        self.read_only = read_only
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self.map_cache = MapCache(config.max_mapped_queue_files)
        self._lock = threading.Lock()
        self.topic_deletions = None        # TopicDeletions: floors of recreated topics

    def find_consume_queue(self, topic: str, queue_id: int, create: bool = True) -> Optional[ConsumeQueue]:
        """The queue of (topic, queue_id); as in RocketMQ, created (empty, in memory) when
        missing unless ``create`` is False."""
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is not None or not create:
            return cq
        with self._lock:
            cq = self._queues.get(key)
            if cq is None:
                cq = ConsumeQueue(topic, queue_id, self.root, self.config.consume_queue_entries,
                                  self.commit_log, read_only=self.read_only,
                                  reserve_chunk=self.config.consume_queue_reserve_bytes, map_cache=self.map_cache)
                if not is_lmq(topic):      # an LMQ entry's record names its parent queue
                    cq.claimed_elsewhere = lambda t, q, i, phy: claimed_elsewhere(self, t, q, i, phy)
                self._apply_floor(cq)
                self._queues[key] = cq
            return cq

    def appender_for(self, topic: str, queue_id: int):
        """The C appender of a queue (the dispatcher's ``resolve`` callback)."""
        return self.find_consume_queue(topic, queue_id).appender

    def load(self) -> bool:
        """Load ``consumequeue/<topic>/<int queueId>/``; other names are ignored. Returns
        False when a damaged file had to be dropped (the queues then need a full replay)."""
        whole = True
        base = os.path.join(self.root, "consumequeue")
        if not os.path.isdir(base):
            return whole
        for topic in sorted(os.listdir(base)):
            tdir = os.path.join(base, topic)
            if not os.path.isdir(tdir):
                continue
            for qname in sorted(os.listdir(tdir)):
                if not qname.isdigit() or not os.path.isdir(os.path.join(tdir, qname)):
                    continue
                cq = self.find_consume_queue(topic, int(qname))
                whole = cq.load() and whole
        return whole

    def load_read_only(self) -> None:
        self.discover()

    def discover(self) -> list:
        """Read-only stores: load queues whose directories appeared; returns them."""
        base = os.path.join(self.root, "consumequeue")
        new = []
        if not os.path.isdir(base):
            return new
        for topic in os.listdir(base):
            tdir = os.path.join(base, topic)
            if not os.path.isdir(tdir):
                continue
            for qname in os.listdir(tdir):
                if not qname.isdigit() or (topic, int(qname)) in self._queues:
                    continue
                cq = self.find_consume_queue(topic, int(qname))
                cq.load_read_only()
                new.append(cq)
        return new

    def follow(self) -> dict:
        """Read-only stores: ``{(topic, queue_id): max offset}`` of queues that grew."""
        grown = {}
        for cq in self.queues():
            before = cq.get_max_offset_in_queue()
            after = cq.follow()
            if after > before:
                grown[(cq.topic, cq.queue_id)] = after
        return grown

    def recover(self) -> tuple[int, int]:
        """Recover every queue. Returns (the largest physical end any queue points at, the
        smallest end of a queue that recovery had to cut in the middle: -1 when none did).
        Dispatch must replay from the latter to refill the cut queues."""
        max_phy, refill_from = -1, -1
        for cq in self.queues():
            whole = cq.recover()
            max_phy = max(max_phy, cq.max_physic_offset)
            if not whole:
                end = max(cq.max_physic_offset, 0)
                refill_from = end if refill_from < 0 else min(refill_from, end)
        return max_phy, refill_from

    def _apply_floor(self, cq: ConsumeQueue) -> None:
        """A queue of a deleted and recreated topic takes no record older than the
        deletion (the dispatcher skips records below a queue's max physical offset)."""
        floor = self.topic_deletions.floor(cq.topic) if self.topic_deletions else -1
        if floor > cq.max_physic_offset:
            cq.appender.set_state(cq.mapped_file_queue.get_last_mapped_file(), floor)

    def apply_floors(self) -> None:
        """After recovery: the deletion floors of every queue (see ``_apply_floor``)."""
        for cq in self.queues():
            self._apply_floor(cq)

    def delete_topic(self, topic: str) -> int:
        """Destroy every queue of ``topic`` and its directory; returns how many queues."""
        with self._lock:
            doomed = [cq for (t, _q), cq in self._queues.items() if t == topic]
            for cq in doomed:
                del self._queues[(cq.topic, cq.queue_id)]
        for cq in doomed:
            cq.destroy()
        tdir = os.path.join(self.root, "consumequeue", topic)
        if os.path.isdir(tdir):
            shutil.rmtree(tdir, ignore_errors=True)
        return len(doomed)

    def drop_deleted(self) -> bool:
        """Read-only stores: unmap queue files the writer deleted and forget queues whose
        directory is gone (a deleted topic). True when anything was dropped."""
        dropped = False
        for cq in self.queues():
            if not os.path.isdir(cq.store_path):
                with self._lock:
                    self._queues.pop((cq.topic, cq.queue_id), None)
                cq.shutdown()
                dropped = True
            elif cq.mapped_file_queue.drop_deleted():
                first = cq.mapped_file_queue.get_first_mapped_file()
                if first is not None and cq.min_logic_offset < first.file_from_offset:
                    cq.min_logic_offset = first.file_from_offset
                dropped = True
        return dropped

    def verify_against_log(self, last_files: int = 0, min_phy: int = 0) -> int:
        """Check every queue's entries (the ``last_files`` newest files of each, all when
        0; files whose records all lie before ``min_phy`` skipped) against the commit
        log; cut at the first wrong entry. Returns the smallest end of a cut queue, or -1."""
        refill_from = -1
        dispatched_to = self.max_physic_offset()

        def witness(topic: str, queue_id: int, index: int, phy: int, size: int) -> Optional[str]:
            if record_destroyed(self.commit_log, phy, size):
                return "lost"
            return "keep" if header_altered(self, self.commit_log, topic, queue_id, index, phy, dispatched_to) else None

        for cq in self.queues():
            if not cq.verify_tail(last_files, witness, min_phy):
                end = max(cq.max_physic_offset, 0)
                refill_from = end if refill_from < 0 else min(refill_from, end)
        return refill_from

    def truncate_dirty(self, phy_offset: int) -> int:
        """The log was cut at ``phy_offset``: entries of records at or past it become lost
        markers (``queue_repair.mark_lost_past``; RocketMQ cuts them, which would hand
        their queue offsets out again). Returns how many entries were marked."""
        marked = 0
        for cq in self.queues():
            if cq.max_physic_offset > phy_offset:
                marked += mark_lost_past(cq, phy_offset)
        return marked

    def forget_empty(self) -> int:
        """Forget queues that have no file and no directory (a replay at open met only
        records older than their topic's deletion, or a header that was altered): they
        hold nothing and must not be listed. Returns how many; the caller makes the
        dispatcher forget its routes."""
        with self._lock:
            gone = [key for key, cq in self._queues.items()
                    if not cq.mapped_file_queue.mapped_files and not os.path.isdir(cq.store_path)]
            for key in gone:
                del self._queues[key]
        return len(gone)

    def destroy_all(self) -> None:
        for cq in self.queues():
            cq.destroy()

    def queues(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for (topic, qid) in sorted(self._queues):
            out.setdefault(topic, []).append(qid)
        return out

    def max_physic_offset(self) -> int:
        return max((cq.max_physic_offset for cq in self.queues()), default=-1)

    def flush(self, least_pages: int) -> None:
        for cq in self.queues():
            cq.flush(least_pages)

    def shutdown(self) -> None:
        for cq in self.queues():
            cq.shutdown()

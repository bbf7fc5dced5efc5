"""Recovery at open: the order in which a writer's store is made whole again.

RocketMQ's ``DefaultMessageStore.recover``: consume queues first (each cut at its last
whole entry), then the commit log. After a clean exit the last segments are rescanned
(``recoverNormally``); after a crash the walk starts at the checkpoint's segment
(``recoverAbnormally``, CRC-checked). Queue entries and index files past the recovered end
are cut; every queue's entries are also checked against the log (all of them after a
crash, the last three files after a clean exit); so are the three newest index files
(older ones when a query first reaches them), a damaged one rebuilt from the log. Then the
topic-queue table (each queue's next offset) is rebuilt from the queues.
"""

from __future__ import annotations

import os
from typing import Optional

from pymq.config import StoreConfig

from .hole_salvage import mark_salvaged

#: after a clean exit, the newest consume-queue files of each queue checked against the
#: log (the files RocketMQ's recovery rescans); older entries are checked when read
CLEAN_EXIT_VERIFIED_FILES = 3
#: how much of a cut tail is read back to salvage queue offsets (its first records)
TORN_TAIL_SALVAGE_BYTES = 8 << 20


def recover(config: StoreConfig, last_exit_ok: bool, commit_log, consume_queues, index_service,
            checkpoint) -> Optional[int]:
    """Recover the queues, the log and the index; returns the commit-log offset the
    dispatcher must replay from (a crash, or a queue cut in its middle), or None."""
    max_phy_of_queues, refill_from = consume_queues.recover()
    replay_from = None
    rescanned = None
    if last_exit_ok:
        files = commit_log.mapped_file_queue.mapped_files
        # the segments the walk rescans are dispatched again too (the queues skip what
        # they hold): a queue whose newest entries were lost gets them back
        rescanned = files[max(0, len(files) - CLEAN_EXIT_VERIFIED_FILES)].file_from_offset if files else None
        process = commit_log.recover_normally(check_crc=config.check_crc_on_recover)
        if rescanned is not None:
            replay_from = rescanned
    else:
        min_ts = (checkpoint.min_timestamp_index() if config.message_index_enable and config.message_index_safe
                  else checkpoint.min_timestamp())
        process, replay_from = commit_log.recover_abnormally(min_ts, config.check_crc_on_recover)
    if not commit_log.mapped_file_queue.mapped_files:
        consume_queues.destroy_all()
    elif max_phy_of_queues >= process:
        consume_queues.truncate_dirty(process)
    # every entry after a crash; after a clean exit the newest files' entries whose records
    # lie in the segments the walk read (the rest are checked when read)
    cut = consume_queues.verify_against_log(0 if not last_exit_ok else CLEAN_EXIT_VERIFIED_FILES,
                                            rescanned or 0)
    if cut >= 0:
        refill_from = cut if refill_from < 0 else min(refill_from, cut)
    salvage_torn_tail(commit_log, consume_queues, process)
    index_service.truncate(process)
    if config.message_index_enable:
        rebuild_index_from = index_service.verify_newest(CLEAN_EXIT_VERIFIED_FILES)
        if rebuild_index_from is not None:
            replay_from = rebuild_index_from if replay_from is None else min(replay_from, rebuild_index_from)
    if refill_from >= 0:                      # a queue lost entries in its middle
        replay_from = refill_from if replay_from is None else min(replay_from, refill_from)
    return replay_from


def salvage_torn_tail(commit_log, consume_queues, process: int) -> int:
    """The log was cut at ``process`` (a torn tail, kept under ``corrupt/``): the queue
    offsets of the records that were there, as far as their fields can be read
    (``hole_salvage``), are marked lost, so an acknowledged record the disk destroyed at
    the end of the log never has its offset handed out again. (A record torn by a crash
    mid-write was never acknowledged; its offset is skipped the same way.) Returns how
    many offsets were marked."""
    marked = 0
    for offset, nbytes, kept in commit_log.damage.torn_tails:
        if offset != process or not kept or not os.path.isfile(kept):
            continue
        with open(kept, "rb") as f:
            data = f.read(min(nbytes, TORN_TAIL_SALVAGE_BYTES))
        marked += mark_salvaged(consume_queues, data, offset)
    return marked


def dispatch_start(config: StoreConfig, queues_whole: bool, replay_from: Optional[int], commit_log,
                   consume_queues, index_service) -> int:
    """The commit-log offset the dispatcher resumes at: where the queues end (RocketMQ's
    rule after a clean exit), or earlier where recovery began (``replay_from``: the
    checkpoint's segment after a crash, the rescanned segments after a clean exit, a
    queue or index file rebuilt); an index that is behind catches up too; damaged queue files
    (``queues_whole`` False) mean a replay of the whole log. Never before the log's first
    record. Dispatch skips what queues and index already hold."""
    if not queues_whole:
        start = 0
    else:
        start = consume_queues.max_physic_offset()
        if replay_from is not None:
            start = min(start, replay_from)
        if config.message_index_enable:
            start = min(start, index_service.indexed_through())
    return max(start, commit_log.get_min_offset(), 0)


def recover_topic_queue_table(commit_log, consume_queues) -> None:
    """Each queue's next offset into the appender (``recoverTopicQueueTable``), and each
    queue's minimum past the records the log no longer has."""
    appender = commit_log.appender
    appender.clear_queue_offsets()
    min_phy = commit_log.get_min_offset()
    for cq in consume_queues.queues():
        appender.set_queue_offset(cq.topic, cq.queue_id, cq.get_max_offset_in_queue())
        cq.correct_min_offset(min_phy)

"""Recovery at open: the order in which a writer's store is made whole again.

RocketMQ's ``DefaultMessageStore.recover``: consume queues first (each cut at its last
whole entry), then the commit log. After a clean exit the last segments are rescanned
(``recoverNormally``); after a crash the walk starts at the checkpoint's segment
(``recoverAbnormally``, CRC-checked). Queue entries and index files past the recovered end
are cut; after a crash every queue's entries are also checked against the log. Then the
topic-queue table (each queue's next offset) is rebuilt from the queues.
"""

from __future__ import annotations

from typing import Optional

from pymq.config import StoreConfig


def recover(config: StoreConfig, last_exit_ok: bool, commit_log, consume_queues, index_service,
            checkpoint) -> Optional[int]:
    """Recover the queues, the log and the index; returns the commit-log offset the
    dispatcher must replay from (a crash, or a queue cut in its middle), or None."""
    max_phy_of_queues, refill_from = consume_queues.recover()
    replay_from = None
    if last_exit_ok:
        process = commit_log.recover_normally(check_crc=config.check_crc_on_recover)
    else:
        min_ts = (checkpoint.min_timestamp_index() if config.message_index_enable and config.message_index_safe
                  else checkpoint.min_timestamp())
        process, replay_from = commit_log.recover_abnormally(min_ts, config.check_crc_on_recover)
    if not commit_log.mapped_file_queue.mapped_files:
        consume_queues.destroy_all()
    elif max_phy_of_queues >= process:
        consume_queues.truncate_dirty(process)
    if not last_exit_ok:
        cut = consume_queues.verify_against_log()
        if cut >= 0:
            refill_from = cut if refill_from < 0 else min(refill_from, cut)
    index_service.truncate(process)
    if refill_from >= 0:                      # a queue lost entries in its middle
        replay_from = refill_from if replay_from is None else min(replay_from, refill_from)
    return replay_from


def dispatch_start(config: StoreConfig, queues_whole: bool, replay_from: Optional[int], commit_log,
                   consume_queues, index_service) -> int:
    """The commit-log offset the dispatcher resumes at: after a clean exit where the queues
    end (RocketMQ's rule); after a crash where recovery began (``replay_from``, the
    checkpoint's segment); an index that is behind catches up too; damaged queue files
    (``queues_whole`` False) mean a replay of the whole log. Never before the log's first
    record. Dispatch skips what queues and index already hold."""
    if not queues_whole:
        start = 0
    else:
        start = consume_queues.max_physic_offset() if replay_from is None else replay_from
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

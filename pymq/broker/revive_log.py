"""The revive log: pop state changes written as records of a system topic, plus a
snapshot that bounds how much of it a restart replays.

RocketMQ 5 writes its pop checkpoints and acks as messages of the revive topic
``rmq_sys_REVIVE_LOG_{cluster}``. pymq does the same, with its own record shapes: every
change of the pop state (:class:`~pymq.broker.pop_state.PopState`) is one record of
queue 0 of that topic, tagged with its kind (``ck``, ``ack``, ``chg``, ``rst``), its body a small
JSON object. Records go through the commit log like any message, so they get the store's
recovery, CRCs and flushing: under ``SYNC_FLUSH`` a record is on disk before the call that
wrote it returns.

:class:`PopStateSnapshot` (``config/popState.json``, written atomically with a ``.bak``)
holds the whole state as of a revive-log queue offset; it is written only after the
commit log was flushed past that offset, so a restart loads it and replays the records
from that offset on.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Optional

from pymq._core.message import Message
from pymq.errors import StoreStateError
from pymq.status import GetMessageStatus, PutMessageStatus
from pymq.store.config_manager import ConfigManager

from .pop_state import PopState

log = logging.getLogger("pymq")

REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"     # + cluster name, as in RocketMQ 5
REVIVE_QUEUE_ID = 0
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"       # the group name replay reads as

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def revive_topic(cluster_name: str) -> str:
    """The revive topic of a cluster (``rmq_sys_REVIVE_LOG_{cluster}``)."""
    return REVIVE_TOPIC_PREFIX + cluster_name


class ReviveLog:
    """Appends pop records to ``topic`` (queue 0) of ``broker`` and replays them."""

    def __init__(self, broker, topic: str) -> None:
        self.broker = broker
        self.topic = topic
        self._put = broker.commit_log.appender.put_system
        self.next_offset = 0        # queue offset the next record gets (set by replay)

    def append(self, kind: str, doc: dict):
        """Append one record; returns its put result. Raises :class:`StoreStateError`
        when the store refuses it (not started, disk full, shut down)."""
        r = self._put(Message(self.topic, _dumps(doc).encode(), tags=kind, queue_id=REVIVE_QUEUE_ID))
        if r.status is not PutMessageStatus.PUT_OK:
            raise StoreStateError(f"cannot write the pop state: {r.status.name}")
        self.next_offset = r.queue_offset + 1
        return r

    def wait_durable(self, result) -> None:
        """Under ``SYNC_FLUSH``, return once ``result``'s record (and every record before
        it) is on disk; raise :class:`StoreStateError` if the flush timed out."""
        broker = self.broker
        if result is None or not broker._sync_flush:
            return
        broker._wait_flushed(result)
        if result.status is not PutMessageStatus.PUT_OK:
            raise StoreStateError("the pop state change is applied but its flush timed out "
                                  f"({result.status.name}); a crash now may undo it")

    def replay(self, state: PopState, from_offset: int) -> int:
        """Apply the records from queue offset ``from_offset`` to ``state``; returns the
        offset after the last one."""
        broker = self.broker
        min_offset = broker.get_min_offset_in_queue(self.topic, REVIVE_QUEUE_ID)
        if from_offset < min_offset:
            log.warning("pop state: revive log records %d..%d are gone (cleaned); the state "
                        "rebuilt from the rest may redeliver acked messages", from_offset, min_offset)
            from_offset = min_offset
        offset = from_offset
        applied = 0
        while True:
            r = broker.get_message(REVIVE_GROUP, self.topic, REVIVE_QUEUE_ID, offset, 32)
            if r.status is GetMessageStatus.FOUND:
                for m in r.messages:
                    try:
                        state.apply(m.tags, json.loads(m.body))
                    except (ValueError, KeyError, TypeError, IndexError) as e:
                        log.error("pop state: skipping bad revive log record at %d: %s", m.queue_offset, e)
                    applied += 1
                offset = r.next_begin_offset
            elif r.next_begin_offset > offset and r.status is not GetMessageStatus.OFFSET_OVERFLOW_BADLY:
                offset = r.next_begin_offset
            else:
                break
        self.next_offset = max(offset, broker.get_max_offset_in_queue(self.topic, REVIVE_QUEUE_ID))
        if applied:
            log.info("pop state: replayed %d revive log records", applied)
        return self.next_offset


def rebuild_pop_state(snapshot: "PopStateSnapshot", revive_log: ReviveLog, store) -> PopState:
    """The pop state as of the end of the revive log: the loaded ``snapshot`` (if it holds
    one) with the records after it applied, each queue's state clamped to what ``store``
    still holds of the queue."""
    state = PopState()
    from_offset = 0
    if snapshot.state_doc is not None:
        state = PopState.from_json(snapshot.state_doc)
        from_offset = snapshot.revive_offset
    revive_log.replay(state, from_offset)
    clamp_pop_state(state, store)
    return state


def clamp_pop_state(state: PopState, store) -> None:
    """Fit each queue's pop state to the offsets ``store`` still holds of the queue."""
    for (_group, topic, qid), s in state.queues.items():
        s.clamp(store.get_min_offset_in_queue(topic, qid), store.get_max_offset_in_queue(topic, qid))


class PopStateSnapshot(ConfigManager):
    """``config/popState.json``: the pop state as of revive-log offset ``revive_offset``."""

    def __init__(self, root_dir: str) -> None:
        super().__init__()
        self.root_dir = os.fspath(root_dir)
        self.revive_offset = 0
        self.state_doc: Optional[dict] = None
        self._text: Optional[str] = None

    def config_file_path(self) -> str:
        return os.path.join(self.root_dir, "config", "popState.json")

    def set(self, revive_offset: int, state_doc: dict) -> None:
        """Replace the content (persisted by the next :meth:`persist`)."""
        text = _dumps({"reviveOffset": revive_offset, "state": state_doc})
        with self._lock:
            self.revive_offset, self.state_doc, self._text = revive_offset, state_doc, text
            self._mark_changed()

    def encode(self, pretty: bool = True) -> str:
        with self._lock:
            return self._text if self._text is not None else _dumps({"reviveOffset": 0, "state": None})

    @staticmethod
    def _parse(text: str) -> tuple[int, Optional[dict]]:
        doc = json.loads(text)
        if not isinstance(doc, dict) or not isinstance(doc.get("reviveOffset"), int):
            raise ValueError("not a pop state snapshot")
        state = doc.get("state")
        if state is not None:
            PopState.from_json(state)       # raises ValueError/KeyError/TypeError if bad
        return doc["reviveOffset"], state

    def decode(self, text: str) -> None:
        try:
            offset, state = self._parse(text)
        except (KeyError, TypeError, IndexError) as e:
            raise ValueError(f"bad pop state snapshot: {e}") from None
        with self._lock:
            self.revive_offset, self.state_doc, self._text = offset, state, text

    def validate(self, text: str) -> None:
        try:
            self._parse(text)
        except (KeyError, TypeError, IndexError) as e:
            raise ValueError(f"bad pop state snapshot: {e}") from None

"""TransactionalMessageService: half messages, commit / rollback, and the check of halves
left open (RocketMQ 4.x's ``TransactionalMessageServiceImpl``, BROKER_SPEC §3).

Records, all in the commit log::

    half    RMQ_SYS_TRANS_HALF_TOPIC queue 0: the prepared message, with REAL_TOPIC,
            REAL_QID, TRAN_MSG=true, PGROUP; transaction bits NOT_TYPE (so it is
            dispatched to the half queue, where no consumer reads)
    commit  the message in REAL_TOPIC / REAL_QID with every property of the half (as
            RocketMQ 4.9.7 stores it: TRAN_MSG, REAL_TOPIC, ... stay), transaction bits
            COMMIT_TYPE, prepared_transaction_offset = the half's commit-log offset
    op      RMQ_SYS_TRANS_OP_HALF_TOPIC queue 0, tags "d", body = the half's queue offset
            as text, property ``__transactionId__`` = the half's unique key: the
            transaction is resolved (committed or rolled back)
    check   a half open past ``transaction_timeout`` is put again at the end of the half
            queue with TRANSACTION_CHECK_TIMES + 1 (same unique key: the same transaction)
            and the application's checker is asked about the copy; past
            ``transaction_check_max`` checks it goes to TRANS_CHECK_MAX_TIME_TOPIC and is
            resolved (discarded)

A transaction is known by its unique key, so a late ``end_transaction`` on the original
half and a checker's answer about its copy resolve it once, whichever comes first.
Progress over the half queue is the consumer offset of group ``CID_RMQ_SYS_TRANS``; the op
records are read back at start, so a restart resolves every half exactly once. The one
crash window (a commit record written, its op not yet) is closed at the check: before a
half is checked, the index is asked for a committed copy of the transaction (same unique
key, in the real topic, with a prepared-transaction offset), and if one exists only the op
is written. See docs/transactions.md.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from typing import Callable, Optional, Union

from pymq._core.layout import TRANSACTION_COMMIT_TYPE, TRANSACTION_TYPE_MASK
from pymq._core.message import Message
from pymq._core.record import decode_message_id
from pymq.errors import PymqError
from pymq.status import GetMessageStatus
from pymq.store.episode_log import EpisodeLog
from pymq.store.service_thread import ServiceThread

log = logging.getLogger("pymq")

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
TRANS_GROUP = "CID_RMQ_SYS_TRANS"
REMOVE_TAG = "d"
TRANSACTION_ID = "__transactionId__"     # MessageConst.PROPERTY_TRANSACTION_ID


class TransactionResolution(enum.Enum):
    """What a checker says of an open half (RocketMQ's LocalTransactionState)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


class TransactionError(PymqError):
    """``end_transaction`` on something that is not an open half message."""


class TransactionalMessageService(ServiceThread):
    """Half messages of a :class:`pymq.Broker` and the check of those left open."""

    name = "TransactionalMessageCheckService"

    def __init__(self, broker, broker_config, clock: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        super().__init__(broker_config.transaction_check_interval / 1000.0)
        # the first check waits an interval, as RocketMQ's does: producers (or the
        # application's checker, set after start()) are there before halves are counted
        self.initial_delay_s = self.interval_s
        self.broker = broker
        self.broker_config = broker_config
        self.clock = clock                  # ms; tests replace it
        self.checker: Optional[Callable] = None
        self._resolved: set[int] = set()    # half queue offsets with an op record
        self._resolved_keys: set[str] = set()   # unique keys of resolved transactions
        self._op_read = 0                   # op queue offset read up to
        self._lock = threading.RLock()
        self.committed = self.rolled_back = self.checked = self.discarded = 0
        self._loaded = False
        self.checker_errors = EpisodeLog(log, "transaction checker")

    # -- state ---------------------------------------------------------------------------

    def _load(self) -> None:
        """Read the op records written since the last start (once, lazily)."""
        if self._loaded:
            return
        self._loaded = True
        self._op_read = 0
        self._read_ops()

    def _read_ops(self) -> None:
        b = self.broker
        end = b.get_max_offset_in_queue(OP_HALF_TOPIC, 0)
        offset = max(self._op_read, b.get_min_offset_in_queue(OP_HALF_TOPIC, 0))
        while offset < end:
            g = b.get_message(TRANS_GROUP, OP_HALF_TOPIC, 0, offset, 32)
            for m in g.messages:
                if m.tags == REMOVE_TAG:
                    try:
                        self._resolved.add(int(m.body))
                    except ValueError:
                        log.warning("transaction op record at %d has no half offset", m.commitlog_offset)
                    key = m.properties.get(TRANSACTION_ID)
                    if key:
                        self._resolved_keys.add(key)
            if g.next_begin_offset <= offset:
                break
            offset = g.next_begin_offset
        self._op_read = offset

    def set_transaction_checker(self, checker: Optional[Callable]) -> None:
        if checker is not None and not callable(checker):
            raise TypeError("the transaction checker must be callable (msg) -> TransactionResolution")
        self.checker = checker

    # -- halves, commit, rollback --------------------------------------------------------

    def put_half_message(self, msg: Message, producer_group: str = "DEFAULT_PRODUCER"):
        """Store ``msg`` as a half message; ``end_transaction(result.msg_id, ...)`` (or the
        result itself) resolves it."""
        if not isinstance(msg, Message):
            raise TypeError(f"put_half_message takes a pymq.Message, not {type(msg).__name__}")
        if msg.delay_level or msg.deliver_time_ms is not None:
            raise ValueError("a transactional message cannot be delayed")
        props = dict(msg.properties)
        props.update({"REAL_TOPIC": msg.topic, "REAL_QID": str(msg.queue_id), "TRAN_MSG": "true",
                      "PGROUP": producer_group})
        half = Message(HALF_TOPIC, msg.body, tags=msg.tags, keys=msg.keys, properties=props, flag=msg.flag,
                       born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                       sys_flag=msg.sys_flag & ~TRANSACTION_TYPE_MASK)
        return self._put_system(half)

    def _put_system(self, msg: Message):
        b = self.broker
        r = b.commit_log.appender.put_system(msg)
        if b._sync_flush and r.is_ok():
            b._wait_flushed(r)
        return r

    def _half(self, handle: Union[str, int, object]):
        if isinstance(handle, int):
            offset = handle
        elif isinstance(handle, str):
            offset = decode_message_id(handle)[1]
        elif hasattr(handle, "commitlog_offset"):
            offset = handle.commitlog_offset
        else:
            raise TypeError("a transaction handle is a half's msg id, commit-log offset or put result")
        half = self.broker.look_message_by_offset(offset)
        if half is None or half.topic != HALF_TOPIC:
            raise TransactionError(f"no half message at commit-log offset {offset}")
        return half

    def end_transaction(self, handle, commit: bool = True) -> bool:
        """Commit (the message appears in its topic and queue) or roll back the half;
        returns False, changing nothing, when the half was resolved already."""
        half = self._half(handle)
        with self._lock:
            self._load()
            self._read_ops()
            if self._is_resolved(half):
                return False
            if commit:
                r = self.broker.put_message(self._committed(half))
                if not r.is_ok():
                    raise TransactionError(f"commit put failed: {r.status.name} {r.error or ''}")
                self.committed += 1
            else:
                self.rolled_back += 1
            self._write_op(half)
            return True

    @staticmethod
    def _committed(half) -> Message:
        return Message(half.properties["REAL_TOPIC"], half.body, properties=dict(half.properties),
                       queue_id=int(half.properties.get("REAL_QID", "0")), flag=half.flag,
                       born_timestamp=half.born_timestamp, born_host=half.born_host,
                       sys_flag=(half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE,
                       prepared_transaction_offset=half.commitlog_offset)

    def _is_resolved(self, half) -> bool:
        key = half.properties.get("UNIQ_KEY")
        return half.queue_offset in self._resolved or (key is not None and key in self._resolved_keys)

    def _write_op(self, half) -> None:
        key = half.properties.get("UNIQ_KEY")
        r = self._put_system(Message(OP_HALF_TOPIC, str(half.queue_offset).encode(), tags=REMOVE_TAG,
                                     properties={TRANSACTION_ID: key} if key else None))
        if not r.is_ok():
            raise TransactionError(f"op record put failed: {r.status.name}")
        self._resolved.add(half.queue_offset)
        if key:
            self._resolved_keys.add(key)

    def _already_committed(self, half) -> bool:
        """The crash window: a commit record written and its op not (found by unique key)."""
        uniq = half.properties.get("UNIQ_KEY")
        topic = half.properties.get("REAL_TOPIC")
        if not uniq or not topic:
            return False
        return any(m.transaction_type == TRANSACTION_COMMIT_TYPE for m in self.broker.query_message(topic, uniq, 64))

    # -- the check -----------------------------------------------------------------------

    def check(self) -> int:
        """One pass over the open halves (``check`` in RocketMQ); returns how many were
        handed to the checker or discarded."""
        b = self.broker
        bc = self.broker_config
        acted = 0
        with self._lock:
            self._load()
            self._read_ops()
            offset = max(b.query_offset(TRANS_GROUP, HALF_TOPIC, 0), b.get_min_offset_in_queue(HALF_TOPIC, 0), 0)
            end = b.get_max_offset_in_queue(HALF_TOPIC, 0)
            now = self.clock()
            while offset < end:
                g = b.get_message(TRANS_GROUP, HALF_TOPIC, 0, offset, 32)
                if g.status is not GetMessageStatus.FOUND:
                    if g.next_begin_offset <= offset:
                        break
                    offset = g.next_begin_offset
                    continue
                stop = False
                for half in g.messages:
                    if self._is_resolved(half):
                        offset = half.queue_offset + 1
                        continue
                    immunity = half.properties.get("CHECK_IMMUNITY_TIME_IN_SECONDS")
                    timeout = int(immunity) * 1000 if immunity and immunity.isdigit() else bc.transaction_timeout
                    if now - half.store_timestamp < timeout:
                        stop = True                 # later halves are younger
                        break
                    if not self._check_one(half):
                        stop = True                 # the re-put failed: try again next pass
                        break
                    acted += 1
                    offset = half.queue_offset + 1
                if stop:
                    break
            b.commit_offset(TRANS_GROUP, HALF_TOPIC, 0, offset)
            self._resolved = {o for o in self._resolved if o >= offset}
        return acted

    def _check_one(self, half) -> bool:
        """Check one open half; False when it must be looked at again."""
        if self._already_committed(half):
            self._write_op(half)
            return True
        times = int(half.properties.get("TRANSACTION_CHECK_TIMES", "0") or 0)
        if times >= self.broker_config.transaction_check_max:
            discarded = Message(CHECK_MAX_TIME_TOPIC, half.body, properties=dict(half.properties),
                                flag=half.flag, born_timestamp=half.born_timestamp, born_host=half.born_host)
            self._put_system(discarded)
            self._write_op(half)
            self.discarded += 1
            log.warning("transaction half %s checked %d times: discarded to %s", half.msg_id, times,
                        CHECK_MAX_TIME_TOPIC)
            return True
        props = dict(half.properties)
        props["TRANSACTION_CHECK_TIMES"] = str(times + 1)
        again = Message(HALF_TOPIC, half.body, properties=props, flag=half.flag,
                        born_timestamp=half.born_timestamp, born_host=half.born_host, sys_flag=half.sys_flag)
        r = self._put_system(again)
        if not r.is_ok():
            return False
        self.checked += 1                           # the copy carries the transaction on
        if self.checker is None:
            return True
        copy = self.broker.look_message_by_offset(r.commitlog_offset)
        try:
            answer = self.checker(copy)
        except Exception as e:
            self.checker_errors.failed(f"{copy.msg_id}: {e!r}", exc_info=True)
            return True
        self.checker_errors.succeeded()
        if answer in (TransactionResolution.COMMIT, TransactionResolution.ROLLBACK):
            self.end_transaction(copy.commitlog_offset, answer is TransactionResolution.COMMIT)
        return True

    def run_once(self) -> None:
        self.check()

    def pending(self) -> int:
        """Halves not resolved yet (an upper bound until the next check pass)."""
        b = self.broker
        start = max(b.query_offset(TRANS_GROUP, HALF_TOPIC, 0), 0)
        end = b.get_max_offset_in_queue(HALF_TOPIC, 0)
        return max(0, end - start - sum(1 for o in self._resolved if o >= start))

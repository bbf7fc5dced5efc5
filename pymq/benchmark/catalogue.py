"""The catalogue of workloads ``pymq bench --full`` runs, in output order."""

from __future__ import annotations

from .aio import (PymqAioPut, PymqAioSyncPut, PymqAioWakeup, PymqThreadPut, PymqThreadSyncPut,
                  PymqThreadWakeup)
from .base import Workload
from .commit import (PymqCommitOffset, PymqConsumerCommit, PymqConsumerCommitThreads, SqliteCommitOffset,
                     SqliteDurableCommit)
from .dispatch_load import DISPATCH_LOAD
from .delivery import PymqDelayDelivery, PymqPutWithoutTimers, PymqPutWithTimers, PymqTimerDelivery
from .many_queues import LmdbManyQueues, PymqManyQueues
from .pop import LitequeuePopDone, PersistQueueAck, PymqPopAck
from .query import LmdbGet, PymqQueryAbsent, PymqQueryMessage, PymqQueryNoTable, SqliteSelect
from .read import (BisectTimeLookup, LmdbCursorRead, PymqDispatch, PymqGetMessage, PymqGetMessageNoCrc,
                   PymqPutMessagesReference, PymqTimeLookup, QueuelibPop)
from .realistic import REALISTIC
from .replication import REPLICATION
from .retention import PymqPutNotCleaning, PymqPutWhileCleaning
from .sqlite import SqliteExecutemany, SqliteInsertPerTxn, SqliteReadPages
from .transaction import PymqPutWithHalves, PymqPutWithoutHalves
from .write import (LmdbPutMulti, LmdbPutPerTxn, PymqPutMessage, PymqPutMessageNoRecordCrc, PymqPutMessages,
                    PymqPutMessagesNoRecordCrc, QueuelibPush)
from .zero_object import ZERO_OBJECT_PUTS
from .zero_object_read import ZERO_OBJECT_READS

#: Every workload, in output order; a group's pymq row comes first.
WORKLOADS: tuple[type[Workload], ...] = (
    PymqPutMessage, PymqPutMessageNoRecordCrc, LmdbPutPerTxn, QueuelibPush, SqliteInsertPerTxn,
    PymqPutMessages, PymqPutMessagesNoRecordCrc, LmdbPutMulti, SqliteExecutemany,
    PymqDispatch, PymqPutMessagesReference,
    PymqGetMessage, PymqGetMessageNoCrc, QueuelibPop, LmdbCursorRead, SqliteReadPages,
    *ZERO_OBJECT_PUTS, *ZERO_OBJECT_READS,
    PymqTimeLookup, BisectTimeLookup,
    PymqQueryMessage, PymqQueryNoTable, PymqQueryAbsent, LmdbGet, SqliteSelect,
    PymqDelayDelivery, PymqTimerDelivery,
    PymqPutWithTimers, PymqPutWithoutTimers,
    PymqPutWhileCleaning, PymqPutNotCleaning,
    PymqPutWithHalves, PymqPutWithoutHalves,
    PymqPopAck, PersistQueueAck, LitequeuePopDone,
    PymqCommitOffset, SqliteCommitOffset,
    PymqConsumerCommit, PymqConsumerCommitThreads, SqliteDurableCommit,
    PymqAioPut, PymqThreadPut,
    PymqAioSyncPut, PymqThreadSyncPut,
    PymqAioWakeup, PymqThreadWakeup,
    *REALISTIC,
    *DISPATCH_LOAD,
    PymqManyQueues, LmdbManyQueues,
    *REPLICATION,
)


def groups() -> list[str]:
    """Workload group names, in output order."""
    return list(dict.fromkeys(w.group for w in WORKLOADS))

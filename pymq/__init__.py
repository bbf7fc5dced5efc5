"""pymq: Apache RocketMQ's message store as an embeddable Python library.

Records are written byte for byte in RocketMQ's v1 commit-log format into mmap'd
segments, so RocketMQ's tools can read what pymq writes.

    import pymq
    with pymq.MessageStore("/data/store", pymq.StoreConfig()) as store:
        r = store.put_message(pymq.Message(topic="TopicTest", body=b"hello", tags="TagA"))
        m = store.look_message_by_offset(r.commitlog_offset)
"""

from pymq._version import __version__
from pymq._core.appender import PutMessageResult
from pymq._core.message import Message, MessageExt
from pymq.config import StoreConfig
from pymq.errors import (
    CorruptRecordError,
    CorruptStoreError,
    DiskFullError,
    PymqError,
    SegmentSizeError,
    StoreLockedError,
    StoreStateError,
)
from pymq.consumer import Consumer
from pymq.simple_consumer import SimpleConsumer
from pymq.message_store import MessageStore
from pymq.broker import Broker, BrokerConfig, SubscriptionGroupConfig
from pymq.broker.transaction import TransactionResolution
from pymq.broker.pop_service import PopResult, PopStatus
from pymq.broker.receipt_handle import InvalidReceiptHandleError
from pymq.broker.recall import InvalidRecallHandleError, RecallTooLateError
from pymq.results import GetMessageResult, ReadBatch
from pymq.status import AppendMessageStatus, BoundaryType, FlushDiskType, GetMessageStatus, PutMessageStatus

__all__ = [
    "__version__",
    "AppendMessageStatus",
    "BoundaryType",
    "Broker",
    "BrokerConfig",
    "Consumer",
    "CorruptRecordError",
    "CorruptStoreError",
    "DiskFullError",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "InvalidReceiptHandleError",
    "InvalidRecallHandleError",
    "Message",
    "MessageExt",
    "MessageStore",
    "PopResult",
    "PopStatus",
    "PutMessageResult",
    "PutMessageStatus",
    "PymqError",
    "ReadBatch",
    "RecallTooLateError",
    "SegmentSizeError",
    "SimpleConsumer",
    "StoreConfig",
    "StoreLockedError",
    "SubscriptionGroupConfig",
    "StoreStateError",
    "TransactionResolution",
]

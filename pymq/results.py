"""Result types of reads (RocketMQ's ``GetMessageResult``; pymq's ``ReadBatch``), defined in
the compiled core."""

from pymq._core.read_batch import ReadBatch
from pymq._core.reader import GetMessageResult

__all__ = ["GetMessageResult", "ReadBatch"]

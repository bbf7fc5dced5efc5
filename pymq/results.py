"""Result types of reads (RocketMQ's ``GetMessageResult``), defined in the compiled core."""

from pymq._core.reader import GetMessageResult

__all__ = ["GetMessageResult"]

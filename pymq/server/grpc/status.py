"""Response statuses: RocketMQ 5's ``Status{code, message}`` and the errors that carry one.

Every handler answers with a status from the protocol's ``Code`` enum; a handler that cannot
go on raises :class:`RequestError` with the code to answer, and anything unexpected becomes
``INTERNAL_SERVER_ERROR`` (the broker and store are left as they were: nothing is written
before a request has been checked).
"""

from __future__ import annotations

from rocketmq.grpc_protocol import definition_pb2 as pb

from pymq.broker.broker_role import SlaveWriteError
from pymq.errors import DiskFullError, StoreStateError

Code = pb.Code


class RequestError(Exception):
    """A request refused with ``code`` (a ``Code`` value) and a message for the client."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def ok() -> pb.Status:
    """Status OK."""
    return pb.Status(code=Code.OK, message="OK")


def status(code: int, message: str) -> pb.Status:
    """A status with ``code`` and ``message``."""
    return pb.Status(code=code, message=message)


def status_of(exc: BaseException) -> pb.Status:
    """The status that answers a request which raised ``exc``."""
    if isinstance(exc, RequestError):
        return status(exc.code, exc.message)
    if isinstance(exc, SlaveWriteError):
        return status(Code.FORBIDDEN, str(exc))
    if isinstance(exc, DiskFullError):
        return status(Code.INTERNAL_SERVER_ERROR, f"disk full: {exc}")
    if isinstance(exc, StoreStateError):
        return status(Code.INTERNAL_SERVER_ERROR, f"store unavailable: {exc}")
    return status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

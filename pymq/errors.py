"""Exceptions raised by pymq.

Expected outcomes of a put or a pull come back as status enums (see :mod:`pymq.status`);
exceptions are for misuse (wrong types), damaged files and an unusable store.
This module imports nothing from pymq.
"""


class PymqError(Exception):
    """Base class of every pymq error."""


class StoreLockedError(PymqError):
    """Another writer holds the store's ``lock`` file."""


class StoreStateError(PymqError):
    """The store is not in a state that allows the call (closed, read-only, not started)."""


class CorruptStoreError(PymqError):
    """A store file is damaged beyond what recovery cuts away."""


class CorruptRecordError(CorruptStoreError):
    """A commit-log record does not parse: bad magic, lengths beyond the buffer, wrong size."""


class SegmentSizeError(CorruptStoreError):
    """A segment file's length differs from the configured file size."""


class DiskFullError(PymqError, OSError):
    """A new segment could not be allocated on disk (``posix_fallocate`` failed)."""

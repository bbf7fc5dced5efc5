"""Fork safety: a store is not shared with a child process forked from its own.

After ``os.fork()`` (gunicorn ``--preload``, multiprocessing's ``fork`` start method)
the child holds a copy of every open store: the same mapped segments (``MAP_SHARED``:
the parent's pages), a copy of the appender's write position, and the ``lock`` file's
descriptor, whose ``flock`` belongs to the open file description it shares with the
parent. Puts from both would get PUT_OK at the same offsets and overwrite each other.

So every store, writer or read-only (and so a ``pymq.Broker`` and whatever
``pymq.aio``, ``Consumer`` and ``SimpleConsumer`` do through it), is tracked in a weak
set, and ``os.register_at_fork(after_in_child=...)`` fences each in the child
(:func:`pymq.store.fence.fence`): every call raises ``StoreStateError`` ("opened in
process N before a fork; open it again in the child"), the compiled appender refuses
puts as a second fence (and the compiled reader pulls), and ``shutdown()`` /
``close()`` / ``__exit__`` do nothing at all, so ``with`` blocks unwind in the child;
the store is marked closed, so a ``shutdown`` bound before the fork (an ``atexit``
handler) does nothing either. Nothing in the child writes: no flush, no
checkpoint, no removal of the ``abort`` marker, and the lock is never released (a
``LOCK_UN`` in the child would drop the parent's lock; the child's copy of the
descriptor just closes with the process). The parent is unaffected.

The hook runs in the child's only thread; threads that held locks in the parent do not
exist there, so it takes none: it only rebinds attributes and sets the appender's flag.
"""

from __future__ import annotations

import os
import weakref

from .fence import fence

__all__ = ["track", "forget", "fence_forked", "forked"]

_OPEN: "weakref.WeakKeyDictionary[object, int]" = weakref.WeakKeyDictionary()


def track(store: object) -> None:
    """Fence ``store`` in every child forked from this process from now on."""
    _OPEN[store] = os.getpid()


def forget(store: object) -> None:
    """Stop tracking ``store`` (it was shut down, and fenced by its shutdown)."""
    _OPEN.pop(store, None)


def _nothing(*_args, **_kwargs) -> None:
    """In a forked child, shutting a store down touches nothing (the store is the
    parent's)."""


def fence_forked(store: object, opened_in: int) -> None:
    """Fence ``store``, opened in process ``opened_in``, in this (forked) process."""
    message = (f"this {type(store).__name__} ({getattr(store, 'store_path', '?')}) was opened in process "
               f"{opened_in} before a fork; open it again in the child")
    fence(store, message)
    attrs = vars(store)
    attrs["shutdown"] = attrs["close"] = _nothing
    attrs["_forked_from"] = opened_in
    # Methods bound before the fork bypass the rebinding (``atexit.register(store.shutdown)``,
    # ``put = store.put_message``): "closed" makes the real shutdown (a Broker's too) return
    # at once, the compiled appender refuses puts, the compiled reader refuses pulls.
    attrs["_closed"] = True
    appender = getattr(attrs.get("commit_log"), "appender", None)
    if appender is not None:
        appender.set_writeable(False, message)
    queue_reader = getattr(attrs.get("reader"), "queue_reader", None)
    if queue_reader is not None:
        queue_reader.closed = True


def forked(store: object) -> bool:
    """Whether ``store`` is the copy of a store in a child forked from its process."""
    return "_forked_from" in vars(store)


def _after_fork_in_child() -> None:
    stores = list(_OPEN.items())
    _OPEN.clear()
    for store, opened_in in stores:
        try:
            fence_forked(store, opened_in)
        except Exception:        # never break the child's start; the fence is per store
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)

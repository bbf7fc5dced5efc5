"""Fencing a store: every public call of a store that may no longer be used raises.

A store is fenced when it shuts down and, in a child process forked from the one that
opened it, right after the fork (:mod:`pymq.store.fork_guard`). A per-call "is it still
open?" test would cost every put and pull: ``MessageStore`` binds its hot paths
(``put_message``, ``get_message``, ``get_message_raw``, ``get_offset_in_queue_by_time``,
``query_message``) as instance attributes straight to compiled methods. Fencing instead
rebinds, on the instance, every public method of the store's class (a ``pymq.Broker``'s
too) and ``_check_open`` (what ``pymq.aio`` asks before it waits) to a function that
raises :class:`pymq.StoreStateError`; an open store pays nothing for it.
"""

from __future__ import annotations

import inspect
from typing import Callable, Iterable

from pymq.errors import StoreStateError

__all__ = ["fence", "public_methods"]

_METHODS: dict[type, tuple[str, ...]] = {}


def public_methods(cls: type) -> tuple[str, ...]:
    """Names of the public methods of ``cls`` and its bases (properties excluded)."""
    names = _METHODS.get(cls)
    if names is None:
        found = []
        for name in dir(cls):
            if name.startswith("_"):
                continue
            attr = inspect.getattr_static(cls, name)
            if isinstance(attr, (property, type)):
                continue
            if isinstance(attr, (staticmethod, classmethod)) or callable(attr):
                found.append(name)
        names = _METHODS[cls] = tuple(found)
    return names


def _refusing(name: str, message: str) -> Callable[..., None]:
    def refused(*_args, **_kwargs) -> None:
        raise StoreStateError(message)

    refused.__name__ = refused.__qualname__ = name
    refused.__doc__ = f"Fenced: raises StoreStateError ({message})."
    return refused


def fence(store: object, message: str, keep: Iterable[str] = ()) -> None:
    """Rebind every public method of ``store`` but those in ``keep``, and its
    ``_check_open``, to functions that raise ``StoreStateError(message)``."""
    keep = frozenset(keep)
    attrs = vars(store)
    for name in public_methods(type(store)):
        if name not in keep:
            attrs[name] = _refusing(name, message)
    attrs["_check_open"] = _refusing("_check_open", message)

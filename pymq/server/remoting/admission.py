"""What request frames may hold of the remoting server's memory, decided before their
bodies are read.

A frame announces its length in its first four bytes. Frames that arrive whole in one read
cost at most that read's buffer (64 KiB); a frame whose body is still on its way must first
be admitted, for its whole length, against two budgets:

- the pool of its connection: ``max_inflight_bytes`` (128 MiB) for the whole server, or,
  when access keys are set and the connection has not yet sent a correctly signed request,
  the much smaller ``max_unauthenticated_bytes`` (16 MiB) shared by every such connection;
- its connection's own ``max_connection_bytes`` (32 MiB), which also counts the requests it
  sent that are still being served (a send waiting for the disk holds its body).

A frame that does not fit waits, its connection reading nothing more, until bytes come
back (first come, first admitted); the frame deadline (``frame_timeout_s``) still runs, so a
peer that holds a budget by stalling is dropped. With access keys set, a frame from a
connection not yet authenticated whose header names no known access key is answered
``NO_PERMISSION`` as soon as its header is read, and its body is read and dropped without
being kept.
"""

from __future__ import annotations

from collections import deque

MAX_INFLIGHT_BYTES = 128 << 20
MAX_UNAUTHENTICATED_BYTES = 16 << 20
MAX_CONNECTION_BYTES = 32 << 20
MAX_HEADER_BYTES = 64 << 10
MAX_HEADER_FIELDS = 128


class ByteBudget:
    """A pool of bytes taken by frames and given back when they are served; connections
    that could not take wait in line (``waiters``) and are called back
    (``conn.budget_granted()``) in turn once their bytes are free."""

    __slots__ = ("name", "limit", "used", "waiters")

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self.used = 0
        self.waiters: deque = deque()

    def take(self, n: int) -> None:
        """Take ``n`` bytes (a frame admitted, or one already read whose request is still
        being served: that one may go over the limit)."""
        self.used += n

    def give(self, n: int) -> None:
        """Give ``n`` bytes back and admit the waiters they make room for."""
        self.used -= n
        waiters = self.waiters
        while waiters:
            conn = waiters[0]
            if conn.closed:
                waiters.popleft()
                continue
            if not conn.budget_fits(self):
                break
            waiters.popleft()
            conn.budget_granted()

    def wait(self, conn) -> None:
        """Queue ``conn`` (its ``budget_wanted`` bytes) until they fit."""
        self.waiters.append(conn)

    def forget(self, conn) -> None:
        """``conn`` closed while waiting."""
        try:
            self.waiters.remove(conn)
        except ValueError:
            pass
        self.give(0)

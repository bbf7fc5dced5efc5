"""PutGate: whether the store takes puts now.

Puts are accepted when the store is started and not shut down, when the disk guard
allows them, and, after an open on a full disk that could not dispatch everything the
log holds, once the dispatcher has caught up (each queue's next offset comes from its
consume queue, so it must be whole first). The gate sets the appender's writeable flag;
the disk guard consults it before it lets puts resume, and the cleaning pass calls
``update`` after each round.
"""

from __future__ import annotations

import logging
from typing import Callable

log = logging.getLogger("pymq")


class PutGate:
    """Opens and closes the appender to puts."""

    def __init__(self, appender, disk_guard, reput_service, recover_queue_table: Callable[[], None],
                 running: Callable[[], bool]) -> None:
        self.appender = appender
        self.disk_guard = disk_guard
        self.reput_service = reput_service
        self.recover_queue_table = recover_queue_table
        self.running = running
        self.dispatch_incomplete = False     # set when an open could not dispatch everything
        self.refusal = None                  # a reason puts are always refused (a slave store)

    def ready(self) -> bool:
        """Whether the store wants puts, whatever the disk says."""
        if not self.running() or self.refusal is not None:
            return False
        if self.dispatch_incomplete:
            rs = self.reput_service
            if rs.behind() or rs.failing:
                return False
            with rs._lock:
                self.recover_queue_table()
            self.dispatch_incomplete = False
            log.warning("dispatch caught up: the queue offsets are recovered")
        return True

    def update(self) -> None:
        """Accept puts when the store wants them and the disk guard allows them."""
        if self.ready():
            if not self.disk_guard.full:
                self.appender.set_writeable(True)
        else:
            self.appender.set_writeable(False, self.refusal)

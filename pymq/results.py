"""Result types of reads (RocketMQ's ``GetMessageResult``)."""

from __future__ import annotations

import dataclasses

from pymq.status import GetMessageStatus


@dataclasses.dataclass
class GetMessageResult:
    """What ``get_message`` returns.

    ``messages`` are ``MessageExt`` objects in queue order; ``next_begin_offset`` is where
    the next pull of this queue starts (RocketMQ 4.9.4+ rules); ``min_offset`` and
    ``max_offset`` are the queue's bounds at the time of the pull.
    """

    status: GetMessageStatus
    messages: list = dataclasses.field(default_factory=list)
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False

    @property
    def message_count(self) -> int:
        return len(self.messages)

    def __iter__(self):
        return iter(self.messages)

    def __len__(self) -> int:
        return len(self.messages)

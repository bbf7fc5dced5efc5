from typing import Any, Callable, Iterator, Optional

from pymq._core.message import MessageExt
from pymq._core.read_batch import ReadBatch
from pymq.status import BoundaryType, GetMessageStatus

class GetMessageResult:
    status: GetMessageStatus
    messages: list[MessageExt]
    buffers: Optional[list[memoryview]]
    raw_count: int
    next_begin_offset: int
    min_offset: int
    max_offset: int
    buffer_total_size: int
    suggest_pulling_from_slave: bool
    damaged: int
    def __init__(self, status: GetMessageStatus, messages: Optional[list[MessageExt]] = ...,
                 next_begin_offset: int = ..., min_offset: int = ..., max_offset: int = ...,
                 buffer_total_size: int = ..., suggest_pulling_from_slave: bool = ...) -> None: ...
    @property
    def message_count(self) -> int: ...
    def __iter__(self) -> Iterator[MessageExt]: ...
    def __len__(self) -> int: ...

class QueueReader:
    closed: bool
    found_count: int
    miss_count: int
    got_messages: int
    got_bytes: int
    def __init__(self, commit_log_queue: Any, commitlog_file_size: int, resolve: Callable[[str, int], Any],
                 parse_filter: Callable[[str], Any], memory_window: int, max_count_memory: int,
                 max_bytes_memory: int, max_count_disk: int, max_bytes_disk: int) -> None: ...
    def forget(self) -> None: ...
    def get_message(self, group: Any, topic: str, queue_id: int, offset: int, max_msgs: int = ...,
                    tags: Optional[str] = ...) -> GetMessageResult: ...
    def get_message_raw(self, group: Any, topic: str, queue_id: int, offset: int, max_msgs: int = ...,
                        tags: Optional[str] = ...) -> GetMessageResult: ...
    def read_batch(self, topic: str, queue_id: int, offset: int, max_msgs: int = ...,
                   tags: Optional[str] = ...) -> ReadBatch: ...
    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, timestamp: int,
                                    boundary: BoundaryType = ...) -> int: ...

def _use_crc_fast(on: bool) -> bool: ...
def _record_crc32(data: Any) -> int: ...

from typing import Any

READ_OK: int
READ_CQ_END: int
READ_UNREADABLE: int
READ_MISMATCH: int

def read_range(app: Any, commitlog_files: list, commitlog_file_size: int, topic: str, queue_id: int,
               start: int, end: int, max_rows: int, max_bytes: int, check_crc: bool = ...) -> tuple[int, int, Any]: ...
def build_messages(*args: Any, **kwargs: Any) -> list: ...

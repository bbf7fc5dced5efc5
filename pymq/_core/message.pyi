from typing import Optional

def decode_properties(raw: bytes | str | None) -> dict[str, str]: ...
def encode_properties(properties: dict[str, Optional[str]]) -> bytes: ...
def format_host(raw: bytes) -> str: ...

class Message:
    topic: str
    body: bytes
    tags: Optional[str]
    keys: Optional[list[str]]
    properties: dict[str, str]
    queue_id: int
    flag: int
    delay_level: int
    deliver_time_ms: Optional[int]
    born_timestamp: int
    born_host: Optional[str]
    sys_flag: int
    reconsume_times: int
    prepared_transaction_offset: int
    message_group: Optional[str]
    def __init__(self, topic: str, body: bytes | bytearray | memoryview = ..., tags: Optional[str] = ...,
                 keys: Optional[list[str] | str] = ..., properties: Optional[dict[str, str]] = ...,
                 queue_id: int = ..., flag: int = ..., delay_level: int = ...,
                 deliver_time_ms: Optional[int] = ..., born_timestamp: int = ...,
                 born_host: Optional[str] = ..., sys_flag: int = ..., message_group: Optional[str] = ...,
                 reconsume_times: int = ..., prepared_transaction_offset: int = ...) -> None: ...

class MessageExt(Message):
    queue_offset: int
    commitlog_offset: int
    store_size: int
    store_timestamp: int
    body_crc: int
    @property
    def store_host(self) -> str: ...
    @property
    def msg_id(self) -> Optional[str]: ...
    @property
    def uniq_key(self) -> Optional[str]: ...
    @property
    def transaction_type(self) -> int: ...
    @property
    def receipt_handle(self) -> Optional[str]: ...
    @property
    def delivery_attempt(self) -> int: ...

"""Reading the custom headers (``extFields``) of remoting requests.

RocketMQ's command headers are flat string maps: a Java broker parses numbers and booleans
out of the strings and refuses a request whose required field is missing
(``RemotingCommandException``, answered ``SYSTEM_ERROR``). These helpers do the same and
raise :class:`RequestError`, which the connection answers with its code and remark.
``SEND_MESSAGE_V2`` carries the fields of ``SEND_MESSAGE`` under one-letter names
(``SendMessageRequestHeaderV2``); :func:`send_header` reads either.
"""

from __future__ import annotations

import json
from typing import Optional

from .codes import ResponseCode


class RequestError(Exception):
    """A request answered with ``code`` and ``remark`` instead of being served."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def require(ext: dict, name: str) -> str:
    value = ext.get(name)
    if value is None or value == "":
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is null")
    return value


def req_int(ext: dict, name: str) -> int:
    value = require(ext, name)
    try:
        return int(value)
    except ValueError:
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is not a number: {value!r}") from None


def opt_int(ext: dict, name: str, default: int = 0) -> int:
    value = ext.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"the custom field <{name}> is not a number: {value!r}") from None


def opt_bool(ext: dict, name: str, default: bool = False) -> bool:
    """A ``Boolean`` header field as RocketMQ's broker reads it (``Boolean.parseBoolean``):
    "true" in any case is true, anything else false. C++ clients write ``1`` / ``0``, which
    RocketMQ therefore reads as false (a C++ client's batch flag ``m=1`` included)."""
    value = ext.get(name)
    if value is None or value == "":
        return default
    return value.lower() == "true"


def opt_str(ext: dict, name: str) -> Optional[str]:
    value = ext.get(name)
    return value if value else None


def json_body(cmd, what: str):
    """The request body parsed as JSON (``what`` names it in the error)."""
    try:
        return json.loads(bytes(cmd.body) or b"null")
    except (ValueError, UnicodeDecodeError) as e:
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"{what} body is not JSON: {e}") from None


def json_bytes(doc) -> bytes:
    """A response body in JSON."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


# SendMessageRequestHeaderV2's one-letter names
_V2_NAMES = {"a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums", "e": "queueId",
             "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties", "j": "reconsumeTimes",
             "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName"}


def send_header(ext: dict, v2: bool) -> dict:
    """The fields of a send request under SEND_MESSAGE's names."""
    if not v2:
        return ext
    return {_V2_NAMES.get(k, k): v for k, v in ext.items()}

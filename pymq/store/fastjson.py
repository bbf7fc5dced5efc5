"""fastjson 1.x text: the dialect of JSON RocketMQ writes its tables in, read and written.

RocketMQ's ``config/*.json`` files and some admin bodies are written by fastjson, which
differs from RFC 8259 JSON in its map keys. A ``Map<Integer, ...>`` has **bare integer
keys**, and a map keyed by an object (``MessageQueue``) has **object keys**::

    consumerOffset.json (pretty, as RocketMQ's encode(true) writes it)
    {
    \t"offsetTable":{
    \t\t"TopicTest@group":{0:250,1:250,2:250,3:250        <- int keys, unquoted,
    \t\t},                                                    on the brace's line
    \t}
    }

    GET_CONSUME_STATS body (compact)
    {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":5,...}},
     "consumeTps":0.0}                                      <- object keys

:func:`loads_fastjson` reads standard JSON and bare integer keys (the form of every
file the store keeps); :func:`dumps_fastjson` writes all three key kinds: ``str``,
``int``, and the keys of an :class:`ObjectKeyMap`. Standard ``json`` can do neither.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from json.decoder import scanstring as _scanstring
from typing import Any

__all__ = ["FastjsonDecodeError", "ObjectKeyMap", "dumps_fastjson", "loads_fastjson"]


class ObjectKeyMap(list):
    """A map whose keys are objects, as fastjson writes ``Map<MessageQueue, ...>``: a list
    of ``(key, value)`` pairs, the key a mapping written as a JSON object."""


class FastjsonDecodeError(json.JSONDecodeError):
    """Text that is neither JSON nor fastjson's dialect of it (a ``ValueError``)."""


_MAX_DEPTH = 200
_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_INT_KEY = re.compile(r"-?(?:0|[1-9][0-9]*)")
_SURROGATE = re.compile("[\ud800-\udfff]")


def loads_fastjson(text: str | bytes | bytearray) -> Any:
    """Parse standard JSON or fastjson 1.x output into Python values.

    Besides RFC 8259 JSON this accepts object keys that are bare integers, as fastjson
    writes ``Map<Integer, …>`` (``{0:250,1:-3}``); such keys become ``int``, quoted keys
    stay ``str``. Objects become ``dict`` (the last duplicate key wins), arrays ``list``,
    numbers ``int`` or ``float``. Bytes are decoded as UTF-8 and a leading BOM is
    skipped. Raises :class:`FastjsonDecodeError` (a ``ValueError``) on anything else,
    including trailing commas and trailing data.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8")
    if not isinstance(text, str):
        raise TypeError(f"loads_fastjson() needs str or bytes, not {type(text).__name__}")
    start = 1 if text.startswith("\ufeff") else 0
    value, i = _parse_value(text, _WS.match(text, start).end(), 0)
    i = _WS.match(text, i).end()
    if i != len(text):
        raise FastjsonDecodeError("Extra data", text, i)
    return value


def _parse_value(s: str, i: int, depth: int) -> tuple[Any, int]:
    c = s[i:i + 1]
    if c == '"':
        return _scan_string(s, i)
    if c == "{":
        return _parse_object(s, i + 1, depth + 1)
    if c == "[":
        return _parse_array(s, i + 1, depth + 1)
    if c == "t" and s.startswith("true", i):
        return True, i + 4
    if c == "f" and s.startswith("false", i):
        return False, i + 5
    if c == "n" and s.startswith("null", i):
        return None, i + 4
    m = _NUMBER.match(s, i)
    if m is None:
        raise FastjsonDecodeError("Expecting value", s, i)
    if m.group(1) or m.group(2):
        return float(m.group()), m.end()
    return int(m.group()), m.end()


def _scan_string(s: str, i: int) -> tuple[str, int]:
    """Scan the string literal whose opening quote is at ``s[i]``."""
    try:
        return _scanstring(s, i + 1, False)
    except json.JSONDecodeError as e:
        raise FastjsonDecodeError(e.msg, s, e.pos) from None


def _check_depth(s: str, i: int, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise FastjsonDecodeError(f"Nesting deeper than {_MAX_DEPTH} levels", s, i)


def _parse_object(s: str, i: int, depth: int) -> tuple[dict, int]:
    _check_depth(s, i, depth)
    obj: dict[Any, Any] = {}
    i = _WS.match(s, i).end()
    if s[i:i + 1] == "}":
        return obj, i + 1
    while True:
        key: Any
        if s[i:i + 1] == '"':
            key, i = _scan_string(s, i)
        else:
            m = _INT_KEY.match(s, i)
            if m is None:
                raise FastjsonDecodeError("Expecting property name (string or integer)", s, i)
            key, i = int(m.group()), m.end()
        i = _WS.match(s, i).end()
        if s[i:i + 1] != ":":
            raise FastjsonDecodeError("Expecting ':' delimiter", s, i)
        i = _WS.match(s, i + 1).end()
        obj[key], i = _parse_value(s, i, depth)
        i = _WS.match(s, i).end()
        c = s[i:i + 1]
        if c == "}":
            return obj, i + 1
        if c != ",":
            raise FastjsonDecodeError("Expecting ',' delimiter", s, i)
        i = _WS.match(s, i + 1).end()


def _parse_array(s: str, i: int, depth: int) -> tuple[list, int]:
    _check_depth(s, i, depth)
    arr: list[Any] = []
    i = _WS.match(s, i).end()
    if s[i:i + 1] == "]":
        return arr, i + 1
    while True:
        value, i = _parse_value(s, i, depth)
        arr.append(value)
        i = _WS.match(s, i).end()
        c = s[i:i + 1]
        if c == "]":
            return arr, i + 1
        if c != ",":
            raise FastjsonDecodeError("Expecting ',' delimiter", s, i)
        i = _WS.match(s, i + 1).end()


def dumps_fastjson(obj: Any, pretty: bool = True) -> str:
    """Serialize ``obj`` the way fastjson 1.x ``JSON.toJSONString(obj, pretty)`` does.

    ``int`` keys are written unquoted, ``str`` keys quoted and the keys of an
    :class:`ObjectKeyMap` as objects; other key types raise ``TypeError``. With ``pretty`` (RocketMQ's ``encode(true)``) every string-keyed entry
    starts a new line indented with tabs, integer-keyed entries stay on the line of the
    opening brace, and the closing brace of a non-empty object goes on its own line, as in
    real RocketMQ files::

        {
        \t"offsetTable":{
        \t\t"TopicTest@group":{0:6,1:3
        \t\t}
        \t}
        }

    Values may be mappings, ObjectKeyMaps, lists/tuples, ``str``, ``int``, finite ``float``, ``bool``
    and ``None``. Non-ASCII text is written as UTF-8, not escaped.
    """
    out: list[str] = []
    _write(obj, out, 0, pretty)
    return "".join(out)


def _encode_str(s: str) -> str:
    text = json.dumps(s, ensure_ascii=False)
    if _SURROGATE.search(text):            # lone surrogates cannot be written as UTF-8
        text = _SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text)
    return text


def _write(obj: Any, out: list[str], indent: int, pretty: bool) -> None:
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, int):
        out.append(int.__repr__(obj))
    elif isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"cannot write {obj!r} as JSON")
        out.append(float.__repr__(obj))
    elif isinstance(obj, str):
        out.append(_encode_str(obj))
    elif isinstance(obj, (Mapping, ObjectKeyMap)):
        _write_map(obj, out, indent, pretty)
    elif isinstance(obj, (list, tuple)):
        if not obj:
            out.append("[]")
            return
        out.append("[")
        for n, value in enumerate(obj):
            if n:
                out.append(",")
            if pretty:
                out.append("\n" + "\t" * (indent + 1))
            _write(value, out, indent + 1, pretty)
        if pretty:
            out.append("\n" + "\t" * indent)
        out.append("]")
    else:
        raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def _write_map(obj: Any, out: list[str], indent: int, pretty: bool) -> None:
    if not obj:
        out.append("{}")
        return
    object_keys = isinstance(obj, ObjectKeyMap)
    out.append("{")
    for n, (key, value) in enumerate(obj if object_keys else obj.items()):
        if n:
            out.append(",")
        if object_keys:
            if not isinstance(key, Mapping):
                raise TypeError(f"ObjectKeyMap keys must be mappings, not {type(key).__name__}")
        elif isinstance(key, bool) or not isinstance(key, (int, str)):
            raise TypeError(f"map keys must be int or str, not {type(key).__name__}")
        if isinstance(key, int):
            out.append(int.__repr__(key))
        else:
            if pretty:
                out.append("\n" + "\t" * (indent + 1))
            _write(key, out, indent + 1, pretty)
        out.append(":")
        _write(value, out, indent + 1, pretty)
    if pretty:
        out.append("\n" + "\t" * indent)
    out.append("}")

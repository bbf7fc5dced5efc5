"""Column buffers from the compiled reader to ``pyarrow.RecordBatch`` (zero-copy).

``pymq._core.columns.read_range`` decodes a queue range into buffers laid out as Arrow
arrays; this module only wraps them (``pyarrow.Array.from_buffers``) and adds the columns
that are constant within a partition (topic, queue id, store).
"""

from __future__ import annotations

import pyarrow as pa

from .schema import ARROW_SCHEMA

_TS = pa.timestamp("us", tz="UTC")
_KEYS_TYPE = ARROW_SCHEMA.field("keys").type
_PROPS_TYPE = ARROW_SCHEMA.field("properties").type
_ENTRIES_TYPE = pa.struct([_PROPS_TYPE.key_field, _PROPS_TYPE.item_field])


def _buf(b):
    return pa.py_buffer(b) if b is not None else None


def _strings(col: dict, typ=pa.string()) -> pa.Array:
    nulls = col["null_count"]
    validity = _buf(col["validity"]) if nulls else None
    return pa.Array.from_buffers(typ, col["length"], [validity, _buf(col["offsets"]), _buf(col["data"])],
                                 null_count=nulls)


def _fixed(typ, n: int, buf) -> pa.Array:
    return pa.Array.from_buffers(typ, n, [None, _buf(buf)], null_count=0)


def _constant(value, typ, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, typ), n)


def to_record_batch(n: int, columns: dict, topic: str, queue_id: int, store: str) -> pa.RecordBatch:
    """The ``n`` rows of one ``read_range`` call as a batch of ``ARROW_SCHEMA``."""
    keys = columns["keys"]
    items = _strings(keys["items"])
    keys_nulls = keys["null_count"]
    keys_arr = pa.Array.from_buffers(
        _KEYS_TYPE, n, [_buf(keys["validity"]) if keys_nulls else None, _buf(keys["offsets"])],
        null_count=keys_nulls, children=[items])
    props = columns["properties"]
    names = _strings(props["names"])
    values = _strings(props["values"])
    entries = pa.Array.from_buffers(_ENTRIES_TYPE, len(names), [None], null_count=0, children=[names, values])
    props_arr = pa.Array.from_buffers(_PROPS_TYPE, n, [None, _buf(props["offsets"])], null_count=0,
                                      children=[entries])
    arrays = [
        _constant(topic, pa.string(), n),
        _constant(queue_id, pa.int32(), n),
        _fixed(pa.int64(), n, columns["queue_offset"]),
        _fixed(pa.int64(), n, columns["commitlog_offset"]),
        _fixed(_TS, n, columns["store_timestamp"]),
        _fixed(_TS, n, columns["born_timestamp"]),
        _strings(columns["tags"]),
        keys_arr,
        props_arr,
        _strings(columns["body"], pa.binary()),
        _strings(columns["msg_id"]),
        _strings(columns["uniq_key"]),
        _strings(columns["born_host"]),
        _strings(columns["store_host"]),
        _fixed(pa.int32(), n, columns["flag"]),
        _fixed(pa.int32(), n, columns["sys_flag"]),
        _fixed(pa.int32(), n, columns["reconsume_times"]),
        _fixed(pa.int32(), n, columns["store_size"]),
        _constant(store, pa.string(), n),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)

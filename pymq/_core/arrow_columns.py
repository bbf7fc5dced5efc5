"""Column buffers of ``pymq._core.columns`` as a ``pyarrow.RecordBatch`` (zero-copy).

``columns.read_range`` (the Spark source) and ``ReadBatch.to_arrow`` decode records in C
into buffers laid out as Arrow arrays; this module wraps them with
``pyarrow.Array.from_buffers``. The columns are the Spark source's (``pymq.spark.schema``
adds the ``store`` column), with the same types. pyarrow is needed only here: the module
is imported when a conversion is asked for.
"""

from __future__ import annotations

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")
KEYS_TYPE = pa.list_(pa.field("element", pa.string(), nullable=False))
PROPERTIES_TYPE = pa.map_(pa.field("key", pa.string(), nullable=False),
                          pa.field("value", pa.string(), nullable=False))
_ENTRIES_TYPE = pa.struct([PROPERTIES_TYPE.key_field, PROPERTIES_TYPE.item_field])

#: one row per message, in this order (the Spark source appends ``store``)
MESSAGE_FIELDS = [
    pa.field("topic", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("commitlog_offset", pa.int64(), nullable=False),
    pa.field("store_timestamp", TIMESTAMP, nullable=False),
    pa.field("born_timestamp", TIMESTAMP, nullable=False),
    pa.field("tags", pa.string()),
    pa.field("keys", KEYS_TYPE),
    pa.field("properties", PROPERTIES_TYPE, nullable=False),
    pa.field("body", pa.binary(), nullable=False),
    pa.field("msg_id", pa.string(), nullable=False),
    pa.field("uniq_key", pa.string()),
    pa.field("born_host", pa.string(), nullable=False),
    pa.field("store_host", pa.string(), nullable=False),
    pa.field("flag", pa.int32(), nullable=False),
    pa.field("sys_flag", pa.int32(), nullable=False),
    pa.field("reconsume_times", pa.int32(), nullable=False),
    pa.field("store_size", pa.int32(), nullable=False),
]
MESSAGE_SCHEMA = pa.schema(MESSAGE_FIELDS)


def _buf(b):
    return pa.py_buffer(b) if b is not None else None


def _strings(col: dict, typ=pa.string()) -> pa.Array:
    nulls = col["null_count"]
    validity = _buf(col["validity"]) if nulls else None
    return pa.Array.from_buffers(typ, col["length"], [validity, _buf(col["offsets"]), _buf(col["data"])],
                                 null_count=nulls)


def _fixed(typ, n: int, buf) -> pa.Array:
    return pa.Array.from_buffers(typ, n, [None, _buf(buf)], null_count=0)


def constant(value, typ, n: int) -> pa.Array:
    """``n`` times ``value`` (a column that is the same in every row)."""
    return pa.repeat(pa.scalar(value, typ), n)


def message_arrays(n: int, columns: dict, topic: str, queue_id: int) -> list:
    """The arrays of ``MESSAGE_FIELDS`` for the ``n`` rows of ``columns``."""
    keys = columns["keys"]
    items = _strings(keys["items"])
    keys_nulls = keys["null_count"]
    keys_arr = pa.Array.from_buffers(
        KEYS_TYPE, n, [_buf(keys["validity"]) if keys_nulls else None, _buf(keys["offsets"])],
        null_count=keys_nulls, children=[items])
    props = columns["properties"]
    names = _strings(props["names"])
    values = _strings(props["values"])
    entries = pa.Array.from_buffers(_ENTRIES_TYPE, len(names), [None], null_count=0, children=[names, values])
    props_arr = pa.Array.from_buffers(PROPERTIES_TYPE, n, [None, _buf(props["offsets"])], null_count=0,
                                      children=[entries])
    return [
        constant(topic, pa.string(), n),
        constant(queue_id, pa.int32(), n),
        _fixed(pa.int64(), n, columns["queue_offset"]),
        _fixed(pa.int64(), n, columns["commitlog_offset"]),
        _fixed(TIMESTAMP, n, columns["store_timestamp"]),
        _fixed(TIMESTAMP, n, columns["born_timestamp"]),
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
    ]


def record_batch(n: int, columns: dict, topic: str, queue_id: int) -> pa.RecordBatch:
    """The ``n`` rows of ``columns`` as a batch of ``MESSAGE_SCHEMA``."""
    return pa.RecordBatch.from_arrays(message_arrays(n, columns, topic, queue_id), schema=MESSAGE_SCHEMA)

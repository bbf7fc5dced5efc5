"""The columns of the ``pymq`` data source: what a read returns and what a write takes.

One row per message. ``READ_SCHEMA`` is what ``spark.read.format("pymq")`` declares;
``ARROW_SCHEMA`` is its exact Arrow form (the Python Data Source API rejects a record batch
whose schema differs in any way: ``string`` not ``large_string``, ``timestamp[us, tz=UTC]``,
non-nullable where the column is NOT NULL). A test checks it against pyspark's own
conversion.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, MapType, StringType, StructField,
                               StructType, TimestampType)

from pymq._core.arrow_columns import MESSAGE_FIELDS

#: (name, Spark type, nullable, what it holds) in column order.
READ_COLUMNS = [
    ("topic", StringType(), False, "the message's topic"),
    ("queue_id", IntegerType(), False, "the queue within the topic (Kafka's partition)"),
    ("queue_offset", LongType(), False, "the index in the consume queue (Kafka's offset)"),
    ("commitlog_offset", LongType(), False, "where the record starts in the commit log"),
    ("store_timestamp", TimestampType(), False, "when the store appended it (ms precision)"),
    ("born_timestamp", TimestampType(), False, "when the producer created it (ms precision)"),
    ("tags", StringType(), True, "the TAGS property, null when absent"),
    ("keys", ArrayType(StringType(), False), True, "the KEYS property split on spaces, null when absent"),
    ("properties", MapType(StringType(), StringType(), False), False,
     "the other stored properties, user and system ones (TAGS, KEYS and UNIQ_KEY have columns)"),
    ("body", BinaryType(), False, "the message body"),
    ("msg_id", StringType(), False, "offset message id: hex of store host and commit-log offset"),
    ("uniq_key", StringType(), True, "the client message id (UNIQ_KEY), null when absent"),
    ("born_host", StringType(), False, "producer address, ip:port"),
    ("store_host", StringType(), False, "store address, ip:port"),
    ("flag", IntegerType(), False, "the message flag"),
    ("sys_flag", IntegerType(), False, "system flag bits (host versions, transaction type)"),
    ("reconsume_times", IntegerType(), False, "redelivery count"),
    ("store_size", IntegerType(), False, "size of the record in the commit log, bytes"),
    ("store", StringType(), False, "absolute path of the store the row came from"),
]

READ_SCHEMA = StructType([StructField(name, dtype, nullable) for name, dtype, nullable, _ in READ_COLUMNS])

ARROW_SCHEMA = pa.schema(MESSAGE_FIELDS + [pa.field("store", pa.string(), nullable=False)])

#: Columns a write uses; ``topic`` and ``body`` are required. Any other column of
#: ``READ_SCHEMA`` is accepted and ignored, so a DataFrame read from one store can be
#: written to another; a column that is in neither raises (a typo must not be dropped).
WRITE_COLUMNS = {
    "topic": "string, required",
    "body": "binary or string (UTF-8), required",
    "tags": "string",
    "keys": "array<string> or string (keys separated by spaces)",
    "properties": "map<string,string>",
    "queue_id": "int; null or absent: spread over queueNums queues",
    "flag": "int",
    "uniq_key": "string, the client message id; null or absent: one is derived from the job",
}

"""Options of the ``pymq`` data source, parsed once on the driver.

Spark hands options over case-insensitively and as strings; every option is parsed and
checked here, so a typo in a value fails the query when it is planned, not in a task.
Names follow Spark's Kafka source where one exists (``startingOffsets``,
``maxOffsetsPerTrigger``, ``minPartitions``, ``failOnDataLoss``, ...).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Optional

from . import stores

DEFAULT_BATCH_ROWS = 32_768
DEFAULT_BATCH_BYTES = 16 << 20
DEFAULT_QUEUE_NUMS = 4

READ_OPTIONS = {
    "path", "topics", "topicpattern", "startingoffsets", "endingoffsets", "startingtimestamp",
    "endingtimestamp", "startingoffsetsbytimestamp", "endingoffsetsbytimestamp", "minpartitions",
    "maxrecordsperpartition", "maxrowsperpartition", "maxoffsetspertrigger", "failondataloss",
    "batchrows", "batchbytes", "filterpushdown",
}
WRITE_OPTIONS = {"path", "queuenums", "locktimeoutms", "sinkid", "checkpointlocation", "queryname"}


def _int(options, name: str, default: Optional[int], minimum: int) -> Optional[int]:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"option {name} must be an integer, not {raw!r}") from None
    if value < minimum:
        raise ValueError(f"option {name} must be >= {minimum}, not {value}")
    return value


def _bool(options, name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    value = str(raw).strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {raw!r}")
    return value == "true"


def _check_known(options, known: set, what: str) -> None:
    for key in options:
        k = key.lower()
        if k not in known and not k.startswith(stores.STORE_OPTION_PREFIX):
            raise ValueError(f"unknown {what} option {key!r}; known: {sorted(known)} and store.<StoreConfig field>")


def parse_offsets_spec(name: str, raw: Optional[str], default: str):
    """``"earliest"``, ``"latest"`` or Kafka's JSON ``{"topic": {"0": 23, "1": -2}}``
    (-2 earliest, -1 latest); for a multi-store source also nested by store name,
    ``{"store": {"topic": {"0": 23}}}``. Returns the string or the parsed dict."""
    if raw is None:
        return default
    raw = str(raw).strip()
    if raw.lower() in ("earliest", "latest"):
        return raw.lower()
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"option {name} must be earliest, latest or JSON like "
                         f'{{"topic":{{"0":23,"1":-2}}}}: {e}') from None
    _check_spec(name, spec, allow_negative=True)
    return spec


def parse_timestamp_spec(name: str, raw: Optional[str]):
    """A JSON ``{"topic": {"0": ms}}`` (or nested by store) of timestamps."""
    if raw is None:
        return None
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as e:
        raise ValueError(f"option {name} must be JSON like {{\"topic\":{{\"0\":1700000000000}}}}: {e}") from None
    _check_spec(name, spec, allow_negative=False)
    return spec


def _check_spec(name: str, spec, allow_negative: bool, depth: int = 0) -> None:
    if not isinstance(spec, dict) or depth > 2:
        raise ValueError(f"option {name}: expected an object of topics to objects of queue ids")
    for key, value in spec.items():
        if isinstance(value, dict):
            if depth == 0 and value and all(isinstance(v, dict) for v in value.values()):
                _check_spec(name, value, allow_negative, depth + 1)     # nested by store
                continue
            for q, off in value.items():
                if not str(q).lstrip("-").isdigit() or int(q) < 0:
                    raise ValueError(f"option {name}: queue id {q!r} of {key!r} is not a number")
                if not isinstance(off, int) or isinstance(off, bool) or off < (-2 if allow_negative else 0):
                    raise ValueError(f"option {name}: bad value {off!r} for {key!r} queue {q}")
        else:
            raise ValueError(f"option {name}: {key!r} must map to an object of queue ids")


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    path: str
    topics: Optional[tuple]
    topic_pattern: Optional[str]
    starting: object                 # "earliest" | "latest" | dict
    ending: object
    starting_ts: Optional[int]
    ending_ts: Optional[int]
    starting_by_ts: Optional[dict]
    ending_by_ts: Optional[dict]
    min_partitions: Optional[int]
    max_records_per_partition: Optional[int]
    max_offsets_per_trigger: Optional[int]
    fail_on_data_loss: bool
    batch_rows: int
    batch_bytes: int
    store_overrides: dict
    filter_pushdown: bool = False

    def matches(self, topic: str) -> bool:
        """Whether ``topic`` is subscribed (``topics``, ``topicPattern``, or every
        non-system topic when neither is given)."""
        if self.topics is not None and topic in self.topics:
            return True
        if self.topic_pattern is not None and re.fullmatch(self.topic_pattern, topic):
            return True
        if self.topics is None and self.topic_pattern is None:
            return not stores.is_system_topic(topic)
        return False


def parse_read_options(options, streaming: bool) -> ReadOptions:
    _check_known(options, READ_OPTIONS, "read")
    path = options.get("path")
    if not path:
        raise ValueError("option 'path' is required: .option('path', store_dir) or .load(store_dir)")
    topics = options.get("topics")
    topic_list = tuple(t.strip() for t in topics.split(",") if t.strip()) if topics else None
    pattern = options.get("topicPattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"option topicPattern is not a regular expression: {e}") from None
    if streaming and options.get("endingOffsets") is not None:
        raise ValueError("option endingOffsets is for batch reads only (as in Spark's Kafka source)")
    max_per_part = _int(options, "maxRecordsPerPartition", None, 1)
    if max_per_part is None:
        max_per_part = _int(options, "maxRowsPerPartition", None, 1)
    return ReadOptions(
        path=str(path),
        topics=topic_list,
        topic_pattern=pattern,
        starting=parse_offsets_spec("startingOffsets", options.get("startingOffsets"),
                                    "latest" if streaming else "earliest"),
        ending=parse_offsets_spec("endingOffsets", options.get("endingOffsets"), "latest"),
        starting_ts=_int(options, "startingTimestamp", None, 0),
        ending_ts=_int(options, "endingTimestamp", None, 0),
        starting_by_ts=parse_timestamp_spec("startingOffsetsByTimestamp", options.get("startingOffsetsByTimestamp")),
        ending_by_ts=parse_timestamp_spec("endingOffsetsByTimestamp", options.get("endingOffsetsByTimestamp")),
        min_partitions=_int(options, "minPartitions", None, 1),
        max_records_per_partition=max_per_part,
        max_offsets_per_trigger=_int(options, "maxOffsetsPerTrigger", None, 1),
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        batch_rows=_int(options, "batchRows", DEFAULT_BATCH_ROWS, 1),
        batch_bytes=_int(options, "batchBytes", DEFAULT_BATCH_BYTES, 1024),
        store_overrides=stores.config_overrides(options),
        filter_pushdown=_bool(options, "filterPushdown", False),
    )


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    path: str
    queue_nums: Optional[int]
    lock_timeout_ms: int
    sink_id: Optional[str]
    store_overrides: dict


def parse_write_options(options, streaming: bool) -> WriteOptions:
    _check_known(options, WRITE_OPTIONS, "write")
    path = options.get("path")
    if not path:
        raise ValueError("option 'path' is required: the store to append to")
    if "," in str(path):
        raise ValueError("a write goes to one store: 'path' must be a single directory")
    sink_id = options.get("sinkId") or options.get("checkpointLocation") or options.get("queryName")
    if streaming and not sink_id:
        raise ValueError("a streaming write to pymq needs a stable identity for its exactly-once ledger: "
                         "set checkpointLocation (or option sinkId)")
    return WriteOptions(
        path=str(path),
        queue_nums=_int(options, "queueNums", None, 1),
        lock_timeout_ms=_int(options, "lockTimeoutMs", 0, 0),
        sink_id=str(sink_id) if sink_id else None,
        store_overrides=stores.config_overrides(options),
    )

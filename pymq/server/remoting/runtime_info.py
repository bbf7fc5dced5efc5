"""The broker's runtime table (``GET_BROKER_RUNTIME_INFO``): what mqadmin's ``brokerStatus``
prints and ``clusterList`` reads, with every key a 4.9.7 broker gives, in its formats.

The values come from the store's own counters (:mod:`pymq.store.store_stats_service`:
totals and rates over 10 s, 1 min and 10 min), its disk and offsets:

- ``putTps``, ``getFoundTps``, ``getMissTps``, ``getTransferedTps``: three rates (10 s, 1
  min, 10 min) separated by spaces, Java's ``Double.toString`` form; ``getTotalTps`` is
  found + miss;
- ``msgPutTotalTodayNow`` / ``msgGetTotalTodayNow``: messages put and got since the
  broker started; ``...TodayMorning`` and ``...YesterdayMorning``: the same totals at the
  last two midnights (local time), or at the start while the broker has not yet seen one,
  as RocketMQ's ``BrokerStats`` records them;
- ``commitLogDiskRatio`` and ``commitLogDirCapacity``: the commit log's disk;
  ``earliestMessageTimeStamp``: the store time of the oldest record, -1 when none;
  ``scheduleMessageOffset_<level>``: the delay level's delivered offset and its queue's
  end, ``"delivered,max"``;
- the thread-pool figures (``sendThreadPoolQueueSize``, ``...HeadWaitTimeMills``,
  ``...Capacity``, the same for pull, query and end-transaction): pymq serves requests on
  its loop as they arrive and queues none, so sizes and head waits are 0, and capacities
  are RocketMQ's defaults.

``pymqVersion`` and ``remotingConnections`` are pymq's own additions.
"""

from __future__ import annotations

import datetime
import time

from pymq._version import __version__

#: MQVersion.CURRENT_VERSION of 4.9.7 (Version.V4_9_7.ordinal()), what its broker reports
BROKER_VERSION = 407
BROKER_VERSION_DESC = "V4_9_7"

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
_POOLS = (("send", 10_000), ("pull", 100_000), ("query", 20_000))


def _java_double(x: float) -> str:
    """``x`` as Java's ``Double.toString`` writes it for the rates at hand (``0.0``, ``12.5``)."""
    text = repr(float(round(x, 6)))
    return text if "e" not in text else f"{x:.1f}"


def _human_bytes(n: int) -> str:
    """RocketMQ's ``UtilAll.humanReadableByteCount(n, false)``: ``0 B``, ``1.5 KiB``..."""
    if n < 1024:
        return f"{n} B"
    exp = 0
    value = float(n)
    while value >= 1024 and exp < 6:
        value /= 1024
        exp += 1
    return f"{value:.1f} {'KMGTPE'[exp - 1]}iB"


def _runtime(seconds: float) -> str:
    s = int(seconds)
    return f"[ {s // 86400} days, {s % 86400 // 3600} hours, {s % 3600 // 60} minutes, {s % 60} seconds ]"


class RuntimeInfo:
    """Builds the table for ``broker`` served by ``server``; ``roll_day()`` (called from the
    server's housekeeping) records the morning totals at midnight."""

    def __init__(self, server) -> None:
        self.server = server
        self.broker = server.broker
        self.boot_ms = int(time.time() * 1000)
        self.day = datetime.date.today()
        put, got = self._totals()
        self.today_morning = self.yesterday_morning = (put, got)

    def _totals(self) -> tuple[int, int]:
        t = self.broker.stats_service.totals()
        return t["put_messages"], t["get_messages"]

    def roll_day(self) -> None:
        """At the first look after midnight: today's morning becomes yesterday's, and the
        totals now are today's morning."""
        today = datetime.date.today()
        if today != self.day:
            self.day = today
            self.yesterday_morning, self.today_morning = self.today_morning, self._totals()

    def table(self) -> dict[str, str]:
        """Key -> text, as a 4.9.7 broker's ``KVTable``."""
        self.roll_day()
        b = self.broker
        rates = b.stats_service.rates()
        windows = [rates[w] for w in ("10s", "1m", "10m")]

        def tps(key: str) -> str:
            return " ".join(_java_double(w[key]) for w in windows)
        totals = b.stats_service.totals()
        put, got = totals["put_messages"], totals["get_messages"]
        usage = b.disk_usage()
        ratio = _java_double(round(usage.ratio, 2)) if usage is not None else "-1.0"
        cl = b.commit_log
        first = cl.get_min_offset()
        earliest = b.reader.pickup_store_timestamp(first) if 0 <= first < cl.get_max_offset() else -1
        mfq = cl.mapped_file_queue
        t = {
            "bootTimestamp": self.boot_ms,
            "brokerVersion": BROKER_VERSION,
            "brokerVersionDesc": BROKER_VERSION_DESC,
            "commitLogDirCapacity": (f"Total : {_human_bytes(usage.total)}, Free : {_human_bytes(usage.free)}."
                                     if usage is not None else "Total : 0 B, Free : 0 B."),
            "commitLogDiskRatio": ratio,
            f"commitLogDiskRatio_{mfq.store_path}": ratio,
            "consumeQueueDiskRatio": ratio,
            "commitLogMaxOffset": b.get_max_phy_offset(),
            "commitLogMinOffset": b.get_min_phy_offset(),
            "dispatchBehindBytes": b.dispatch_behind_bytes(),
            "dispatchMaxBuffer": 0,
            "earliestMessageTimeStamp": earliest,
            "getFoundTps": tps("get_found_tps"),
            "getMissTps": tps("get_miss_tps"),
            "getTransferedTps": tps("get_transferred_tps"),
            "getTotalTps": " ".join(_java_double(w["get_found_tps"] + w["get_miss_tps"]) for w in windows),
            "getMessageEntireTimeMax": 0,
            "msgGetTotalTodayMorning": self.today_morning[1],
            "msgGetTotalTodayNow": got,
            "msgGetTotalYesterdayMorning": self.yesterday_morning[1],
            "msgPutTotalTodayMorning": self.today_morning[0],
            "msgPutTotalTodayNow": put,
            "msgPutTotalYesterdayMorning": self.yesterday_morning[0],
            "pageCacheLockTimeMills": 0,
            "putLatency99": "0.00",
            "putLatency999": "0.00",
            "putMessageAverageSize": _java_double(totals["put_bytes"] / put if put else 0.0),
            "putMessageDistributeTime": "null",
            "putMessageEntireTimeMax": 0,
            "putMessageFailedTimes": 0,
            "putMessageSizeTotal": totals["put_bytes"],
            "putMessageTimesTotal": put,
            "putTps": tps("put_tps"),
            "remainHowManyDataToFlush": _human_bytes(mfq.how_much_fall_behind()),
            "remainTransientStoreBufferNumbs": 2147483647,
            "runtime": _runtime(time.time() - self.boot_ms / 1000),
            "startAcceptSendRequestTimeStamp": 0,
            "EndTransactionQueueSize": 0,
            "EndTransactionThreadPoolQueueCapacity": 100_000,
            "pymqVersion": __version__,
            "remotingConnections": len(self.server.connections),
        }
        for name, capacity in _POOLS:
            t[f"{name}ThreadPoolQueueSize"] = 0
            t[f"{name}ThreadPoolQueueHeadWaitTimeMills"] = 0
            t[f"{name}ThreadPoolQueueCapacity"] = capacity
        for level, delivered in sorted(b.schedule_service.offsets.table().items()):
            t[f"scheduleMessageOffset_{level}"] = f"{delivered},{b.get_max_offset_in_queue(SCHEDULE_TOPIC, level - 1)}"
        return {k: str(v) for k, v in t.items()}

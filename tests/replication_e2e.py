"""Helpers of the replication end-to-end tests (issue 28): the Java ``HaClient`` (official
4.9.7 producer and push consumer), raw remoting sends and pulls (what a master acknowledged,
what a slave serves), what a broker's queues hold, a topic's route, waiting."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import struct
import threading
import time
from typing import Optional

import pytest

from remoting_wire import FrameReader, call, connect, request
from rocketmq_decoder import decode_record

MESSAGES = int(os.environ.get("PYMQ_HA_E2E_MESSAGES", "1000"))
"""Messages per end-to-end case (CI: 1,000; the issue's 10,000 by hand)."""
SEGMENT = 16 * 1024 * 1024
"""pymq's commit-log segments in these tests (serve_process.prepare_store): a real broker on
the other side of the HA port must use the same (``mappedFileSizeCommitLog``)."""
PULL = {"consumerGroup": "ha_check", "maxMsgNums": 32, "sysFlag": 0, "commitOffset": 0,
        "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0}
"""A PULL_MESSAGE header but its topic, queue and offset."""


def compile_ha_client(rocketmq_home, out: pathlib.Path):
    """tests/java/HaClient.java as a :class:`real_rocketmq.JavaProgram`."""
    from real_rocketmq import REPO, JavaProgram
    return JavaProgram.compile(rocketmq_home, out, REPO / "tests" / "java" / "HaClient.java")


def java_json(program, run_dir: pathlib.Path, *args: str, timeout: float = 300) -> dict:
    """Run HaClient to its end; the one JSON line it printed."""
    p = program.run(run_dir, *args, timeout=timeout)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines, p.stdout[-3000:]
    return json.loads(lines[-1])


def create_topic(broker: str, topic: str, queues: int = 4) -> None:
    """UPDATE_AND_CREATE_TOPIC on a master's broker port."""
    head, _ = call(broker, 17, {"topic": topic, "readQueueNums": queues, "writeQueueNums": queues, "perm": 6,
                                "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})
    assert head["code"] == 0, head


def queued(broker: str, topic: str, queues: int = 4) -> int:
    """Messages in a broker's queues of ``topic``: the sum of GET_MAX_OFFSET over its queues."""
    total = 0
    for q in range(queues):
        head, _ = call(broker, 30, {"topic": topic, "queueId": q})
        total += int(head["extFields"]["offset"]) if head["code"] == 0 else 0
    return total


def route_brokers(namesrv: str, topic: str) -> dict:
    """brokerName -> {brokerId: address} of the topic's route (GET_ROUTEINFO_BY_TOPIC)."""
    from pymq.store.fastjson import loads_fastjson
    head, body = call(namesrv, 105, {"topic": topic})
    if head["code"] != 0:
        return {}
    return {b["brokerName"]: {int(k): v for k, v in b["brokerAddrs"].items()}
            for b in loads_fastjson(body)["brokerDatas"]}


def wait_for(check, timeout: float, what) -> object:
    """``check()``'s first true value, polled every 0.2 s; fails the test after ``timeout``
    seconds, naming ``what`` (a string, or a callable giving one then)."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what() if callable(what) else what}")
        time.sleep(0.2)


def send_until_closed(addr: str, topic: str, prefix: str, acked: dict, others: dict,
                      stop: threading.Event, count: Optional[int] = None) -> None:
    """Send "<prefix>-<n, 7 digits>" bodies to queue n % 4 of ``topic`` (SEND_MESSAGE), one at a
    time on one connection, until it breaks, ``stop`` is set or ``count`` were sent: SEND_OK
    answers go to ``acked`` (body -> (queueId, queueOffset)), other codes are counted in
    ``others``."""
    try:
        s = connect(addr)
    except OSError:
        return
    reader = FrameReader(s)
    n = 0
    try:
        while not stop.is_set() and (count is None or n < count):
            body = f"{prefix}-{n:07d}".encode()
            ext = {"producerGroup": "kill_pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
                   "queueId": str(n % 4), "sysFlag": "0", "bornTimestamp": str(int(time.time() * 1000)),
                   "flag": "0", "properties": "", "reconsumeTimes": "0"}
            s.sendall(request(10, ext, opaque=n + 1, body=body))
            got = reader.frame(timeout=10)
            if got is None:
                return
            head, _ = got
            if head["code"] == 0:
                acked[body] = (int(head["extFields"]["queueId"]), int(head["extFields"]["queueOffset"]))
            else:
                others[head["code"]] = others.get(head["code"], 0) + 1
            n += 1
    except (OSError, socket.timeout, struct.error):
        return
    finally:
        s.close()


def slave_bodies(slave: str, topic: str, queue: int, start: int, count: int) -> dict:
    """queueOffset -> body of the slave's messages in ``queue`` from ``start`` (PULL_MESSAGE)."""
    out = {}
    off = start
    while off < start + count:
        head, body = call(slave, 11, dict(PULL, topic=topic, queueId=queue, queueOffset=off))
        if head["code"] != 0:
            break
        pos = 0
        while pos < len(body):
            rec = decode_record(body, pos)
            out[rec["queue_offset"]] = bytes(rec["body"])
            pos += rec["total_size"]
        off = int(head["extFields"]["nextBeginOffset"])
    return out


def missing_on_slave(slave: str, topic: str, acked: dict) -> list:
    """The acknowledged bodies the slave does not serve at their queue and offset."""
    by_queue: dict = {}
    for body, (q, off) in acked.items():
        by_queue.setdefault(q, []).append((off, body))
    missing = []
    for q, items in by_queue.items():
        lo = min(o for o, _ in items)
        have = slave_bodies(slave, topic, q, lo, max(o for o, _ in items) - lo + 1)
        missing += [b for o, b in items if have.get(o) != b]
    return missing

"""Helpers of the replication end-to-end tests (issue 28): the Java ``HaClient`` (official
4.9.7 producer and push consumer), what a broker's queues hold, a topic's route, waiting."""

from __future__ import annotations

import json
import os
import pathlib
import time

import pytest

from remoting_wire import call

MESSAGES = int(os.environ.get("PYMQ_HA_E2E_MESSAGES", "1000"))
"""Messages per end-to-end case (CI: 1,000; the issue's 10,000 by hand)."""
SEGMENT = 16 * 1024 * 1024
"""pymq's commit-log segments in these tests (serve_process.prepare_store): a real broker on
the other side of the HA port must use the same (``mappedFileSizeCommitLog``)."""


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

"""Parked pulls of an in-process RemotingServer: woken by a put within a fraction of a
second, answered at their deadline, dropped with their connection, answered at shutdown."""

from __future__ import annotations

import asyncio
import json
import struct
import time

import pymq
from pymq.broker.topic_config import TopicConfig
from pymq.server.remoting import RemotingConfig, RemotingServer

from .test_robustness import request


def _pull(queue_offset: int, suspend_ms: int, opaque: int = 1) -> bytes:
    return request(11, {"consumerGroup": "HG", "topic": "HoldTopic", "queueId": 0, "queueOffset": queue_offset,
                        "maxMsgNums": 32, "sysFlag": 2, "suspendTimeoutMillis": suspend_ms}, opaque=opaque)


async def _read(reader: asyncio.StreamReader) -> dict:
    total = struct.unpack(">i", await reader.readexactly(4))[0]
    data = await reader.readexactly(total)
    hlen = struct.unpack(">i", data[:4])[0] & 0xFFFFFF
    return json.loads(data[4:4 + hlen])


def _run(tmp_path, scenario):
    cfg = pymq.StoreConfig(commitlog_file_size=1 << 20, consume_queue_entries=1000, index_hash_slots=1000,
                           index_max_entries=4000, warm_mapped_file_enable=False)
    broker = pymq.Broker(str(tmp_path / "store"), cfg).start()
    broker.topic_config_manager.update_topic_config(TopicConfig("HoldTopic"))     # a pull needs the topic
    try:
        async def main():
            server = RemotingServer(broker, RemotingConfig(namesrv_port=None, broker_port=0))
            ports = await server.start()
            try:
                return await scenario(broker, server, ports["broker"])
            finally:
                await server.stop()
        return asyncio.run(main())
    finally:
        broker.shutdown()


def test_parked_pull_woken_by_a_put(tmp_path):
    async def scenario(broker, server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_pull(0, 10_000))
        await writer.drain()
        await asyncio.sleep(0.3)
        assert len(server.hold) == 1
        t0 = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(
            None, broker.put_message, pymq.Message("HoldTopic", b"wake", queue_id=0))
        head = await asyncio.wait_for(_read(reader), 5)
        assert head["code"] == 0 and time.monotonic() - t0 < 0.5
        assert head["extFields"]["nextBeginOffset"] == "1" and len(server.hold) == 0
        writer.close()
    _run(tmp_path, scenario)


def test_parked_pull_answered_at_its_deadline_and_dropped_with_its_connection(tmp_path):
    async def scenario(broker, server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        t0 = time.monotonic()
        writer.write(_pull(0, 600))
        await writer.drain()
        head = await asyncio.wait_for(_read(reader), 5)
        assert head["code"] == 19 and 0.55 < time.monotonic() - t0 < 2.0
        writer.write(_pull(0, 60_000, opaque=2))
        await writer.drain()
        await asyncio.sleep(0.3)
        assert len(server.hold) == 1
        writer.close()
        await asyncio.sleep(0.3)
        assert len(server.hold) == 0, "the closed connection's pull is dropped"
    _run(tmp_path, scenario)


def test_shutdown_answers_parked_pulls(tmp_path):
    async def scenario(broker, server, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_pull(0, 60_000))
        await writer.drain()
        await asyncio.sleep(0.3)
        stopping = asyncio.ensure_future(server.stop())
        head = await asyncio.wait_for(_read(reader), 5)
        await stopping
        assert head["code"] == 19
        writer.close()
    _run(tmp_path, scenario)

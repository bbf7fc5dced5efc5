"""The send queue of ``--flush sync`` under a flood: RocketMQ's ``SYSTEM_BUSY`` answers
(``[OVERLOAD]`` when the queue is full, ``[TIMEOUT_CLEAN_QUEUE]`` for a send that waited too
long for a worker), every request answered, and exactly the sends answered SUCCESS stored."""

from __future__ import annotations

import asyncio
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from pymq.server.remoting.headers import RequestError
from pymq.server.remoting.send_queue import SendQueue
from server.hostile_support import SEND_MESSAGE_V2, frame, read_frame      # tests/ is on sys.path

from .conftest import Server, run_node


def _send(topic: str, i: int) -> bytes:
    return frame(SEND_MESSAGE_V2, {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": i % 4, "f": 0,
                                   "g": int(time.time() * 1000), "h": 0, "i": ""}, b"flood-%d" % i, opaque=i + 1)


def test_a_flood_on_a_sync_flush_server_is_answered_busy_not_left_waiting(tmp_path):
    n = 4000
    server = Server(str(tmp_path / "store"), "--flush", "sync", "--send-queue-capacity", "32").start()
    try:
        server.create_topics("Flood")
        host, port = server.broker.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            t0 = time.monotonic()
            s.sendall(b"".join(_send("Flood", i) for i in range(n)))
            answers = [read_frame(s, timeout=30)[0] for _ in range(n)]
            took = time.monotonic() - t0
        codes = [a["code"] for a in answers]
        assert set(codes) <= {0, 2}, sorted(set(codes))
        busy = [a["remark"] for a in answers if a["code"] == 2]
        assert busy and all(r.startswith(("[OVERLOAD]system busy, start flow control for a while",
                                          "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while"))
                            for r in busy), busy[:3]
        assert sorted(a["opaque"] for a in answers) == list(range(1, n + 1)), "every send answered once"
        offsets = run_node({"mode": "invoke", "addr": server.broker,
                            "requests": [{"code": 30, "header": {"topic": "Flood", "queueId": q}} for q in range(4)]})
        stored = sum(int(x["ext"]["offset"]) for x in offsets)
        assert stored == codes.count(0), (stored, codes.count(0), len(busy))
        print(f"{n} sends in {took:.2f} s: {codes.count(0)} stored, {len(busy)} SYSTEM_BUSY")
    finally:
        server.stop()


class _Pool:
    """What SendQueue needs of the server: a thread pool (one worker here)."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1)

    async def call_blocking(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)


def test_a_send_that_waited_past_the_limit_is_refused_and_not_made():
    made = []

    def slow_put(i):
        time.sleep(0.05)
        made.append(i)
        return i

    async def main():
        q = SendQueue(_Pool(), capacity=2, wait_ms=20)
        first, second, third = await asyncio.gather(q.put(slow_put, 1), q.put(slow_put, 2), q.put(slow_put, 3),
                                                    return_exceptions=True)
        return q, first, second, third
    q, first, second, third = asyncio.run(main())
    assert first == 1 and made == [1], "only the first put was made"
    assert isinstance(second, RequestError) and second.code == 2
    assert second.remark.startswith("[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, "
                                    "period in queue: ") and "size of queue: " in second.remark
    assert isinstance(third, RequestError) and third.remark == "[OVERLOAD]system busy, start flow control for a while"
    assert (q.refused_full, q.refused_waited, q.size) == (1, 1, 0)

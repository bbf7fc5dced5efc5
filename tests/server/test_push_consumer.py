"""PushConsumer (official RocketMQ 5 Python client) against ``pymq serve``: every message
reaches the listener; a failed one is retried (change invisible duration by the group's
backoff) and consumed on a later attempt."""

from __future__ import annotations

import threading
import time

from .conftest import make_message


def test_push_consumer_consumes_all_and_retries_failures(server, client_config, producer_factory):
    from rocketmq import FilterExpression, PushConsumer
    from rocketmq.v5.consumer.push.message_listener import ConsumeResult, MessageListener

    lock = threading.Lock()
    seen: dict[str, list[int]] = {}
    done = set()

    class Listener(MessageListener):
        def consume(self, message):
            body = message.body.decode()
            with lock:
                seen.setdefault(body, []).append(message.delivery_attempt)
                # every 10th message fails on its first attempt
                if body.endswith("0") and message.delivery_attempt == 1:
                    return ConsumeResult.FAILURE
                done.add(body)
            return ConsumeResult.SUCCESS

    p = producer_factory(["PushTopic"])
    consumer = PushConsumer(client_config, "g-push", Listener(), {"PushTopic": FilterExpression("*")},
                            consumption_thread_count=4)
    consumer.startup()
    try:
        bodies = {f"p{i}" for i in range(60)}
        for b in sorted(bodies):
            p.send(make_message("PushTopic", b.encode()))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and done != bodies:
            time.sleep(0.2)
        assert done == bodies
        for b in bodies:
            if b.endswith("0"):
                assert seen[b][:2] == [1, 2], (b, seen[b])     # failed once, redelivered once
            else:
                assert seen[b] == [1], (b, seen[b])            # consumed exactly once
    finally:
        consumer.shutdown()


def test_slow_listener_keeps_its_message_hidden(server_factory):
    """auto_renew: a listener slower than the invisible slice does not see its message
    delivered again (the server renews it while the client holds it)."""
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, PushConsumer
    from rocketmq.v5.consumer.push.message_listener import ConsumeResult, MessageListener
    srv = server_factory("--renew-slice", "1500")
    cfg = ClientConfiguration(srv.endpoint, Credentials(), request_timeout=5)
    calls = []

    class Slow(MessageListener):
        def consume(self, message):
            calls.append((message.body, message.delivery_attempt))
            time.sleep(5)                   # more than three slices
            return ConsumeResult.SUCCESS

    p = Producer(cfg, ("SlowTopic",))
    p.startup()
    consumer = PushConsumer(cfg, "g-slow", Slow(), {"SlowTopic": FilterExpression("*")}, consumption_thread_count=2)
    consumer.startup()
    try:
        p.send(make_message("SlowTopic", b"slow"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not calls:
            time.sleep(0.1)
        time.sleep(8)
        assert calls == [(b"slow", 1)]
    finally:
        consumer.shutdown()
        p.shutdown()

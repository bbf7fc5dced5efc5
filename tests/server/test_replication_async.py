"""Issue 28, end to end through ``pymq serve``: with ASYNC_MASTER the loss at failover is
bounded by the replication lag, and the lag is reported (``--metrics-port``:
``pymq_replication_lag_bytes`` / ``_seconds`` on master and slave).

The slave process is frozen (SIGSTOP) so that it acknowledges nothing, the master takes
sends (each SEND_OK at once: it waits for no slave), the metrics page of the master shows
the bytes and the age of what the slave has not acknowledged; the master is SIGKILLed and
the slave thawed: the acknowledged sends the slave lacks fit in the bytes the master
reported, and the slave's own page reports what it lacks of what the master announced.
"""

from __future__ import annotations

import re
import signal
import threading
import time
import urllib.request

import pytest

from remoting_wire import call
from replication_e2e import PULL, create_topic, missing_on_slave, send_until_closed, wait_for
from rocketmq_decoder import decode_record
from serve_process import ServeProcess

TOPIC = "AsyncLagT"


def metrics_port(p: ServeProcess) -> int:
    line = next(x for x in p.output if "metrics on" in x)
    return int(re.search(r":(\d+)/metrics", line).group(1))


def scrape(port: int) -> dict:
    """metric name with its labels -> value, from the text exposition."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("pymq_replication"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


@pytest.fixture
def pair(tmp_path):
    from real_rocketmq import free_ports
    port = free_ports()[1]
    master = ServeProcess(str(tmp_path / "master"), "--port", "off", "--namesrv-port", "off", "--broker-port",
                          str(port), "--vip-port", "off", "--broker-role", "async_master",
                          "--metrics-port", "0").start()
    slave = None
    try:
        slave = ServeProcess(str(tmp_path / "slave"), "--port", "off", "--namesrv-port", "off", "--broker-port", "0",
                             "--ha-port", "off", "--broker-role", "slave", "--master", f"127.0.0.1:{port + 1}",
                             "--master-broker", f"127.0.0.1:{port}", "--slave-sync-interval", "0.5",
                             "--metrics-port", "0").start()
        yield master, slave
    finally:
        if slave is not None:
            if slave.alive():
                slave.proc.send_signal(signal.SIGCONT)
            slave.stop()
        master.stop(sig=signal.SIGKILL)


def test_async_master_loss_bounded_by_reported_lag(pair):
    master, slave = pair
    m_port, s_port = metrics_port(master), metrics_port(slave)
    create_topic(master.listening["broker"], TOPIC)
    wait_for(lambda: f'"{TOPIC}"'.encode() in call(slave.listening["broker"], 21, {})[1], 20,
             "the slave to sync the topic")
    acked: dict = {}
    others: dict = {}
    send_until_closed(master.listening["broker"], TOPIC, "before", acked, others, threading.Event(), 200)
    assert len(acked) == 200 and not others
    # caught up: both pages say so
    wait_for(lambda: scrape(m_port).get('pymq_replication_lag_bytes{role="ASYNC_MASTER"}') == 0, 20,
             lambda: f"the master's lag to reach 0: {scrape(m_port)}")
    m = scrape(m_port)
    assert m["pymq_replication_slaves_connected"] == 1 and m['pymq_replication_lag_seconds{role="ASYNC_MASTER"}'] == 0
    s = wait_for(lambda: (lambda s: s if s.get('pymq_replication_lag_bytes{role="SLAVE"}') == 0 else None)(
        scrape(s_port)), 10, "the slave's lag to reach 0")
    assert s["pymq_replication_connected"] == 1 and s['pymq_replication_lag_seconds{role="SLAVE"}'] == 0
    assert not missing_on_slave(slave.listening["broker"], TOPIC, acked)

    record = _record_size(slave, acked)
    slave.proc.send_signal(signal.SIGSTOP)             # acknowledges nothing from now on
    later: dict = {}
    send_until_closed(master.listening["broker"], TOPIC, "during", later, others, threading.Event(), 3000)
    assert len(later) == 3000 and not others             # ASYNC_MASTER: SEND_OK without the slave
    time.sleep(1.0)
    m = scrape(m_port)
    lag_bytes, lag_s = m['pymq_replication_lag_bytes{role="ASYNC_MASTER"}'], m[
        'pymq_replication_lag_seconds{role="ASYNC_MASTER"}']
    per_slave = [v for k, v in m.items() if k.startswith("pymq_replication_slave_lag_bytes{")]
    assert per_slave == [lag_bytes]
    assert 0 < lag_bytes <= 3000 * record and lag_bytes % record == 0, (lag_bytes, record)
    assert lag_s >= 1.0, lag_s

    master.proc.send_signal(signal.SIGKILL)
    master.stop(timeout=10)
    slave.proc.send_signal(signal.SIGCONT)
    time.sleep(1.0)                                     # what the socket still held is applied and dispatched
    lost = missing_on_slave(slave.listening["broker"], TOPIC, {**acked, **later})
    assert all(b.startswith(b"during-") for b in lost)
    assert len(lost) * record <= lag_bytes, (len(lost), record, lag_bytes)
    s = scrape(s_port)
    slave_lag = s['pymq_replication_lag_bytes{role="SLAVE"}']
    assert s["pymq_replication_connected"] == 0
    assert slave_lag <= lag_bytes
    print(f"\nASYNC_MASTER: master reported lag {lag_bytes:,.0f} bytes ({lag_bytes / record:,.0f} records of "
          f"{record} B), {lag_s:.2f} s; after SIGKILL the slave lacks {len(lost)} of {len(later)} acknowledged "
          f"sends ({len(lost) * record:,} bytes); the slave reports a lag of "
          f"{slave_lag:,.0f} bytes")


def _record_size(slave: ServeProcess, acked: dict) -> int:
    """Size of one record of these tests (every body has the same length)."""
    q, off = next(iter(acked.values()))
    head, body = call(slave.listening["broker"], 11, dict(PULL, topic=TOPIC, queueId=q, queueOffset=off,
                                                           maxMsgNums=1))
    assert head["code"] == 0, head
    return decode_record(body, 0)["total_size"]

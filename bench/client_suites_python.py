"""The Python client's examples (rocketmq-clients ``python/example``) against ``pymq serve``,
for ``bench/client_suites.py``.

Each example is run as written, with these edits (``EDITS``): the endpoint; the transaction
example sends to a TRANSACTION topic of its own and the consumers get groups of their own
(the examples share ``topic`` and ``consumer-group`` across message types and consumers,
which RocketMQ 5 refuses: a transactional message on a NORMAL topic, a lite consumer in a
group bound to another topic); the lite consumer binds ``parent-topic``, where the lite
producer sends. The topics and the lite group are made first, as mqadmin 5.x makes them
(``-a +message.type=...``, ``-a +lite.bind.topic=...``).

The consumers (simple, push, lite push) start first; then the producers run one at a time;
then the consumers are given time to take what was sent and are stopped. An example passes
when it printed no exception and sent, or consumed, every message it should have
(``EXPECTED``); the transaction example also when the server asked its checker (the
example commits from the check).
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

from client_suites_env import create_group, create_topic

TOPICS = {"topic": "NORMAL", "delay-topic": "DELAY", "fifo-test-topic": "FIFO", "transaction-topic": "TRANSACTION",
          "priority-topic": "PRIORITY", "parent-topic": "LITE"}
LITE_GROUP = "lite-consumer-group"

EDITS = {
    "transaction_producer_example.py": [('topic = "topic"', 'topic = "transaction-topic"')],
    "push_consumer_example.py": [('consumer_group = "consumer-group"', 'consumer_group = "push-consumer-group"')],
    "lite_push_consumer_example.py": [('bind_topic = "topic"', 'bind_topic = "parent-topic"'),
                                      ('consumer_group = "consumer-group"', f'consumer_group = "{LITE_GROUP}"')],
}

PRODUCERS = ("normal_producer_example.py", "async_producer_example.py", "delay_producer_example.py",
             "fifo_producer_example.py", "transaction_producer_example.py", "priority_producer_example.py",
             "lite_producer_example.py")
CONSUMERS = ("simple_consumer_example.py", "push_consumer_example.py", "lite_push_consumer_example.py")

#: what each example must print that many times: its sends, or the messages it consumes (the
#: normal and async producers send 10 each to ``topic``, which both plain consumers read in
#: groups of their own; the lite producer sends one message to each of the 10 lite topics
#: the lite consumer subscribes)
EXPECTED = {
    "normal_producer_example.py": ("send message success", 10),
    "async_producer_example.py": ("send message success", 10),
    "delay_producer_example.py": ("send message success", 1),
    "fifo_producer_example.py": ("send message success", 9),
    "transaction_producer_example.py": ("send message success", 1),
    "priority_producer_example.py": ("send message success", 10),
    "lite_producer_example.py": ("send message success", 10),
    "simple_consumer_example.py": ("ack message", 20),
    "push_consumer_example.py": ("consume message", 20),
    "lite_push_consumer_example.py": ("consume message", 10),
}
FAILURE_WORDS = ("raise exception", "failed")


def prepare(examples: pathlib.Path, dest: pathlib.Path, endpoint: str) -> None:
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for path in examples.glob("*_example.py"):
        text = path.read_text().replace('endpoints = "foobar.com:8080"', f'endpoints = "{endpoint}"')
        for old, new in EDITS.get(path.name, ()):
            if old not in text:
                raise RuntimeError(f"{path.name} no longer holds {old!r}")
            text = text.replace(old, new)
        (dest / path.name).write_text(text)


class Example:
    """One example in its own process, its output in ``<name>.log``, stdin a pipe (the
    examples wait for Enter before they stop)."""

    def __init__(self, folder: pathlib.Path, name: str, env: dict) -> None:
        self.name = name
        self.log = folder / (name[:-3] + ".log")
        self.proc = subprocess.Popen([sys.executable, "-u", name], cwd=folder, env=env, stdin=subprocess.PIPE,
                                     stdout=open(self.log, "w"), stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def count(self, words: str) -> int:
        return self.output().count(words)

    def wait_for(self, words: str, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.count(words) >= n or self.proc.poll() is not None:
                return self.count(words) >= n
            time.sleep(0.2)
        return False

    def enter(self) -> None:
        """Enter at its prompt."""
        try:
            self.proc.stdin.write(b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def stop(self, timeout: float = 20) -> None:
        self.enter()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGINT)        # the simple consumer loops until interrupted
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def verdict(self) -> str | None:
        """None when it passed, else why not."""
        out = self.output()
        words, n = EXPECTED[self.name]
        bad = [line for line in out.splitlines() if any(w in line for w in FAILURE_WORDS)]
        if bad:
            return bad[0][:300]
        if out.count(words) < n:
            return f"{out.count(words)} of {n} '{words}'"
        return None


def run_python_examples(server, examples: pathlib.Path, folder: pathlib.Path) -> dict:
    """Runs the examples against ``server`` (a started :class:`PymqServe`); mocha-like
    counts (``passed``, ``failed``, ``failures``: "name: why")."""
    for topic, message_type in TOPICS.items():
        create_topic(server, topic, attributes=f"+message.type={message_type}")
    create_group(server, LITE_GROUP, {"lite.bind.topic": "parent-topic"})
    prepare(examples, folder, server.endpoint)
    env = dict(os.environ, HOME=str(folder / "home"), PYTHONUNBUFFERED="1")
    consumers = [Example(folder, name, env) for name in CONSUMERS]
    time.sleep(10)                              # started and subscribed before anything is sent
    done = []
    for name in PRODUCERS:
        p = Example(folder, name, env)
        words, n = EXPECTED[name]
        p.wait_for(words, n, 60)
        if name == "transaction_producer_example.py":
            p.wait_for("do TestChecker check", 1, 90)     # committed by the server's check
        p.stop()
        done.append(p)
    for c in consumers:
        words, n = EXPECTED[c.name]
        c.wait_for(words, n, 60)
        c.stop()
    failures = []
    for e in done + consumers:
        why = e.verdict()
        if e.name == "transaction_producer_example.py" and why is None and not e.count("do TestChecker check"):
            why = "the server never asked the checker"
        if why is not None:
            failures.append(f"{e.name}: " + re.sub(r"\s+", " ", why))
    total = len(done) + len(consumers)
    return {"passed": total - len(failures), "failed": len(failures), "pending": 0, "failures": failures}

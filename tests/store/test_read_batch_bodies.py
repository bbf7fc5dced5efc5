"""``ReadBatch.bodies``: a sequence whose iteration recycles the views nobody holds.

A loop over ``batch.bodies`` that lets each body go before the next makes two views, not
one per message; any view still referred to (kept in a list, in a variable, in a tuple,
by a buffer exported from it) keeps its body. The oracle is the bodies as put.
"""

from __future__ import annotations

import time

import pytest

import pymq

TOPIC = "Bodies"
BODIES = [b"body-%03d-" % i + b"x" * (i % 50) for i in range(32)]     # one pull's worth


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("bodies") / "s"
    with pymq.MessageStore(root, pymq.StoreConfig(commitlog_file_size=1 << 20, consume_queue_entries=1024)) as s:
        assert s.put_bodies(TOPIC, BODIES).is_ok()
        deadline = time.monotonic() + 10
        while s.dispatch_behind_bytes():
            assert time.monotonic() < deadline
            time.sleep(0.002)
        yield s


def test_a_loop_that_lets_each_body_go_makes_two_views(store):
    with store.read_batch(TOPIC, 0, 0, 32) as b:
        ids, got = set(), []
        for body in b.bodies:
            ids.add(id(body))
            got.append(bytes(body))
        assert got == BODIES and len(ids) == 2
        assert [len(v) for v in b] == [len(x) for x in BODIES]


def test_kept_views_keep_their_bodies(store):
    with store.read_batch(TOPIC, 0, 0, 32) as b:
        kept = list(b.bodies)
        assert [bytes(v) for v in kept] == BODIES and len({id(v) for v in kept}) == 32
        every_third = [v for i, v in enumerate(b.bodies) if i % 3 == 0]
        held = None
        for i, body in enumerate(b.bodies):
            if i == 7:
                held = body                       # a variable keeps one past the loop's step
        views = [memoryview(v) for v in b.bodies]    # an exported buffer keeps its view
        pairs = list(zip(b.bodies, BODIES))
        assert [bytes(v) for v in every_third] == BODIES[::3]
        assert bytes(held) == BODIES[7]
        assert [bytes(m) for m in views] == BODIES
        assert all(bytes(v) == x for v, x in pairs)
        del views


def test_bodies_is_a_sequence(store):
    with store.read_batch(TOPIC, 0, 5, 10) as b:
        bodies = b.bodies
        assert b.bodies is bodies and len(bodies) == 10
        assert bodies == BODIES[5:15] and bodies == tuple(BODIES[5:15]) and bodies != BODIES[5:14]
        assert list(b) == bodies and bodies == list(b)
        assert bytes(bodies[0]) == BODIES[5] and bytes(bodies[-1]) == BODIES[14]
        assert [bytes(v) for v in bodies[2:8:3]] == BODIES[7:13:3]
        with pytest.raises(IndexError):
            bodies[10]
        with pytest.raises(TypeError):
            hash(bodies)
        it = iter(bodies)
        first = next(it)
    with pytest.raises(ValueError):                # released: the sequence and its views raise
        iter(bodies)
    with pytest.raises(ValueError):
        bodies[0]
    with pytest.raises(ValueError):
        next(it)
    with pytest.raises(ValueError):
        bytes(first)
    empty = store.read_batch(TOPIC, 0, 32)
    assert empty.bodies == [] and len(empty.bodies) == 0 and list(empty) == []
    empty.release()

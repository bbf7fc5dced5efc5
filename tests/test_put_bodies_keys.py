"""``put_bodies(keys=)``: the plain-key path and the general one give ``Message(keys=)``'s
records and errors (issue 27).

A plain key (an exact, compact ASCII str, not empty, without a space or a byte below 3) is
checked and copied eight bytes at a time (``pymq_plain_key.h``); every other key takes the
general path. These tests put keys of every length up to 40 with an odd character at the
start, the middle, the end, so that each byte position of the 8-byte words (and the
overlapping last word) is seen by the check, and compare with ``put_messages`` of the same
``Message(keys=)``: the same records, or the same exception with the same message. The
keys list is read in place: what a key's own Python code does to the list is covered too.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

import pymq

from conftest import small_config
from test_put_bodies import as_messages, assert_same_records

_topics = itertools.count()

# a space splits, \x00 is kept as it is, \x01 / \x02 are refused, the rest are not ASCII
ODD = [" ", "\x00", "\x01", "\x02", "\x7f", "é", "€", "\U0001f600"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = pymq.MessageStore(tmp_path_factory.mktemp("pbk") / "store", small_config(commitlog_file_size=1 << 20))
    s.start()
    yield s
    s.shutdown()


def put_both(store, keys):
    """``put_messages`` then ``put_bodies`` of the same keys (one body each): each one's
    ``("ok", result)`` or ``("raises", type, message)``."""
    topic = f"PK{next(_topics)}"
    bodies = [b"body-%d" % i for i in range(len(keys))]

    def run(fn):
        try:
            return ("ok", fn())
        except (TypeError, ValueError) as e:
            return ("raises", type(e), str(e))

    a = run(lambda: store.put_messages(as_messages(topic, bodies, keys, None, None)))
    b = run(lambda: store.put_bodies(topic, bodies, keys=keys))
    return a, b


def assert_same(store, keys):
    before = store.get_max_phy_offset()
    a, b = put_both(store, keys)
    if a[0] == "raises":
        assert b == a
        assert store.get_max_phy_offset() == before
        return None
    assert b[0] == "ok" and a[1].is_ok() and b[1].is_ok()
    assert_same_records(store, a[1], b[1])
    return b[1]


def keys_with(ch: str) -> list[str]:
    """ASCII keys of length 1..40, ``ch`` (if any) at the first, middle and last place."""
    out = []
    for n in range(1, 41):
        base = "".join(chr(ord("a") + (i * 7 + n) % 26) for i in range(n))
        if ch is None:
            out.append(base)
            continue
        for at in sorted({0, n // 2, n - 1}):
            out.append(base[:at] + ch + base[at + 1:])
    return out


def test_plain_keys_of_every_length_are_written_as_they_are(store):
    keys = keys_with(None)
    r = assert_same(store, keys)
    assert [store.look_message_by_offset(o).keys for o in r.commitlog_offsets] == [[k] for k in keys]


@pytest.mark.parametrize("ch", ODD, ids=[repr(c) for c in ODD])
def test_a_key_with_an_odd_character_anywhere_is_what_message_makes_of_it(store, ch):
    for key in keys_with(ch):
        # alone (a refused key fails its batch), and among plain keys on both sides
        assert_same(store, [key])
        assert_same(store, ["order-0000000001", key, "k", None, "order-0000000002"])


def test_keys_that_are_not_plain_strs(store):
    class Sub(str):
        def __str__(self):
            return "not-this"

    # (not Sub(""): Message raises TypeError for it, put_bodies takes it as "", no KEYS)
    for keys in ([Sub("mine")], [Sub("two words")], [Sub(" ")], [""], ["   "], [" a  b "],
                 [["a", "b"]], [("a", "b")], [["a b"]], [["only"]], [[Sub("x"), "y"]], [[]],
                 [[""]], [["a", ""]], [1], [b"ab"], [["a", 1]], [("a", 1)], [None, "k"]):
        assert_same(store, keys)


def test_a_str_subclass_key_is_its_characters_not_its_str(store):
    class Sub(str):
        def __str__(self):
            return "not-this"

    r = assert_same(store, [Sub("mine"), Sub("a b")])
    assert [store.look_message_by_offset(o).keys for o in r.commitlog_offsets] == [["mine"], ["a", "b"]]


def test_long_keys_grow_the_key_buffer(store):
    # more key bytes than the buffer starts with (24 a message)
    keys = [("k%d-" % i) * 40 for i in range(30)] + ["é" * 200, "x" * 3000]
    r = assert_same(store, keys)
    assert [store.look_message_by_offset(o).keys for o in r.commitlog_offsets] == [[k] for k in keys]


@pytest.mark.parametrize("kind", ["tuple", "generator", "numpy", "arrow", "list-subclass"])
def test_keys_given_as_other_sequences(store, kind):
    keys = [f"order-{i:010d}" for i in range(5)] + ["a b", None]
    given = {"tuple": lambda: tuple(keys), "generator": lambda: iter(keys),
             "numpy": lambda: np.array(keys, dtype=object), "arrow": lambda: pa.array(keys),
             "list-subclass": lambda: type("L", (list,), {})(keys)}[kind]()
    r = store.put_bodies(f"PK{next(_topics)}", [b"x"] * len(keys), keys=given)
    got = [store.look_message_by_offset(o).keys for o in r.commitlog_offsets]
    assert got == [[k] for k in keys[:5]] + [["a", "b"], None]


class ChangesTheList:
    """A key whose iteration (the general path runs it) does something to the keys list."""

    def __init__(self, change):
        self.change = change
        self.keys = None

    def __iter__(self):
        self.change(self.keys)
        return iter(["mine"])


def _keys_around(key) -> list:
    # strings made here, held by the list only: freed if the list lets go of them
    keys = ["".join(["before-", str(i)]) for i in range(20)] + [key] + ["".join(["after-", str(i)]) for i in range(20)]
    key.keys = keys
    return keys


@pytest.mark.parametrize("change", ["append", "clear"])
def test_a_keys_list_resized_during_the_put_raises_and_writes_nothing(store, change):
    key = ChangesTheList(lambda keys: keys.append("extra") if change == "append" else keys.clear())
    keys = _keys_around(key)
    n = len(keys)
    before = store.get_max_phy_offset()
    with pytest.raises(RuntimeError, match="keys changed size"):
        store.put_bodies("Resized", [b"x"] * n, keys=keys)
    assert store.get_max_phy_offset() == before


def test_keys_read_before_the_list_changed_are_the_ones_written(store):
    # the list is not copied: a key replacing the strings before it (dropping the last
    # reference to them) must not change what is written for those
    def replace(keys):
        keys[:] = ["replaced-%d" % i for i in range(len(keys))]

    key = ChangesTheList(replace)
    keys = _keys_around(key)
    r = store.put_bodies("Replaced", [b"x"] * len(keys), keys=keys)
    got = [store.look_message_by_offset(o).keys[0] for o in r.commitlog_offsets]
    assert got[:21] == [f"before-{i}" for i in range(20)] + ["mine"]
    # the ones after it are read from the list as it is then
    assert got[21:] == [f"replaced-{i}" for i in range(21, 41)]

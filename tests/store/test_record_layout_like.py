"""``record_layout_like`` (the pull's layout of a record shaped as the one before it) gives
``record_layout``'s answer for every input: the one acceptance rule, reached sooner.

Records are encoded with random fields, then the target is either a record of the same
shape (the case the shortcut takes) or of another one, and then damaged at random (bytes
overwritten, including the length fields the shortcut compares, or cut short)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pymq._core.record import _layouts, encode_message

_HOSTS = ("127.0.0.1:10911", "[::1]:10911")


@st.composite
def _shape(draw):
    """The lengths and flags of a record: body, topic and properties lengths, v6 hosts,
    whether the properties end with a CRC entry."""
    return (draw(st.integers(0, 300)), draw(st.integers(1, 40)), draw(st.integers(0, 60)),
            draw(st.sampled_from(_HOSTS)), draw(st.sampled_from(_HOSTS)), draw(st.booleans()))


def _record(draw, shape) -> bytes:
    body_len, topic_len, props_len, born, store, crc_entry = shape
    letters = st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789")
    topic = "".join(draw(st.lists(letters, min_size=topic_len, max_size=topic_len)))
    props = b"".join(bytes([c]) for c in draw(st.lists(st.integers(32, 126), min_size=props_len,
                                                          max_size=props_len)))
    if crc_entry:
        digits = "".join(draw(st.lists(st.sampled_from("0123456789"), min_size=10, max_size=10)))
        props = (props + b"\x02" if props else b"") + b"__CRC32#\x01" + digits.encode() + b"\x02"
    return encode_message(topic, draw(st.binary(min_size=body_len, max_size=body_len)), props,
                          queue_id=draw(st.integers(0, 64)), queue_offset=draw(st.integers(0, 1 << 40)),
                          physical_offset=draw(st.integers(0, 1 << 40)), born_host=born, store_host=store,
                          store_timestamp=draw(st.integers(0, 1 << 45)), born_timestamp=draw(st.integers(0, 1 << 45)))


@st.composite
def _pair(draw):
    like_shape = draw(_shape())
    like = _record(draw, like_shape)
    rec = _record(draw, like_shape if draw(st.booleans()) else draw(_shape()))
    buf = bytearray(rec)
    for _ in range(draw(st.integers(0, 3))):
        # overwrite 1..4 bytes anywhere (the length fields, the magic, the flags, the tail)
        at = draw(st.integers(0, len(buf) - 1))
        for i, b in enumerate(draw(st.binary(min_size=1, max_size=4))):
            if at + i < len(buf):
                buf[at + i] = b
    if draw(st.integers(0, 9)) == 0:
        buf = buf[:draw(st.integers(0, len(buf)))]
    return bytes(buf), like


@settings(max_examples=1500, deadline=None)
@given(_pair())
def test_layout_like_is_record_layout(pair):
    rec, like = pair
    full, quick = _layouts(rec, like)
    assert quick == full


def test_same_shape_is_taken_and_damage_refused():
    like = encode_message("T", b"x" * 100, b"UNIQ_KEY\x01abc\x02__CRC32#\x010123456789\x02")
    rec = bytearray(encode_message("T", b"y" * 100, b"UNIQ_KEY\x01def\x02__CRC32#\x019876543210\x02",
                                   queue_offset=7, store_timestamp=12345))
    full, quick = _layouts(bytes(rec), like)
    assert quick == full and full[0] == len(rec) and full[2] == 12345 and full[-1] is True
    rec[-1] = 0                                  # the CRC entry's end: no CRC entry, still a record
    assert _layouts(bytes(rec), like)[1] == _layouts(bytes(rec), like)[0]
    assert _layouts(bytes(rec), like)[1][-1] is False
    rec[20] = 0xFF                               # a negative queue offset: refused by both
    assert _layouts(bytes(rec), like) == ((-1,), (-1,))

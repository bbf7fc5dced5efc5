"""The properties string codec (MessageDecoder.string2messageProperties, 4.9.7)."""

import pytest

from pymq._core.message import decode_properties, encode_properties


@pytest.mark.parametrize("raw", ["", " ", "aaa", "k1\x01", "\x01v1", "\x02\x02", "ab"])
def test_degenerate_strings_give_empty_maps(raw):
    assert decode_properties(raw) == {}
    assert decode_properties(raw.encode()) == {}


def test_round_trip_and_edge_cases():
    props = {"a": "123", "b": "hello", "c": "3.14", "\u4e2d": "\u6587\U0001F600"}
    raw = encode_properties(props)
    assert raw == "a\x01123\x02b\x01hello\x02c\x013.14\x02\u4e2d\x01\u6587\U0001F600".encode()
    assert decode_properties(raw) == props
    assert decode_properties("a\x01b\x02") == {"a": "b"}                   # trailing separator
    assert decode_properties("a\x01b\x02\x01x\x02c\x01d") == {"a": "b", "c": "d"}   # empty key dropped
    assert decode_properties("a\x01\x02c\x01d") == {"c": "d"}               # empty value dropped
    assert decode_properties("k\x01v\x01x") == {"k": "v\x01x"}              # 4.9.7 keeps extra \x01


def test_none_values_are_skipped_and_types_checked():
    assert encode_properties({"a": None, "b": "c"}) == b"b\x01c"
    with pytest.raises(TypeError):
        encode_properties({"a": 1})
    with pytest.raises(ValueError):
        encode_properties({"a\x02": "b"})

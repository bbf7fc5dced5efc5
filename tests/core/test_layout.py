"""The compiled constants agree with layout.py, and layout.py with RocketMQ's numbers."""

from pymq._core import layout, record


def test_magic_codes():
    assert record.MESSAGE_MAGIC_CODE_C == layout.MESSAGE_MAGIC_CODE == -626843481
    assert record.BLANK_MAGIC_CODE_C == layout.BLANK_MAGIC_CODE == -875286124
    assert layout.MESSAGE_MAGIC_CODE & 0xFFFFFFFF == 0xDAA320A7
    assert layout.BLANK_MAGIC_CODE & 0xFFFFFFFF == 0xCBD43194


def test_message_length_agrees():
    for sys_flag in (0, 0x10, 0x20, 0x30):
        for b, t, p in [(0, 0, 0), (5, 9, 9), (4 << 20, 127, 32767)]:
            assert record.message_length(sys_flag, b, t, p) == layout.cal_msg_length(sys_flag, b, t, p)
    assert layout.cal_msg_length(0, 5, 9, 9) == 114

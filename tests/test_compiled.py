"""The tests run against the compiled core, not a silent fallback."""

import importlib

import pymq
import pymq._core as core


def test_compiled_core_is_loaded():
    assert core.COMPILED
    for name in ("message", "record", "mapped_file", "appender"):
        mod = importlib.import_module(f"pymq._core.{name}")
        assert mod.__file__.endswith(".so"), mod.__file__


def test_public_types_are_extension_types():
    # a C type has no __dict__ on its instances and a compiled module
    assert type(pymq.Message).__name__ == "type"
    assert not hasattr(pymq.Message("t"), "__dict__")
    assert pymq.Message.__module__ == "pymq._core.message"


def test_crc_uses_a_carry_less_multiply_when_the_cpu_has_one():
    with open("/proc/cpuinfo") as f:
        has_pclmul = "pclmulqdq" in f.read()
    impl = core.record.crc32_impl()
    assert impl != "slice-by-8" if has_pclmul else impl == "slice-by-8"

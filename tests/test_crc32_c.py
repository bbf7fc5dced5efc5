"""Build and run the C CRC-32 test harness (tests/c/test_crc32.c) against zlib.

Runs it once per implementation the CPU supports (PYMQ_CRC32_IMPL caps the dispatch),
plus an AddressSanitizer/UBSan build that catches reads past the end of the buffer.
Needs a C compiler (``cc``, or ``$CC``) and the zlib headers; a missing compiler is a
failure, not a skip.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "pymq" / "_core" / "src"
CRC_C = SRC / "pymq_crc32.c"
TEST_C = ROOT / "tests" / "c" / "test_crc32.c"
GENERATOR = ROOT / "ci" / "gen_crc32_constants.py"
IMPLS = ("slice-by-8", "pclmulqdq", "vpclmulqdq-avx512")


def _cc():
    cc = shlex.split(os.environ.get("CC", "cc"))
    if shutil.which(cc[0]) is None:
        pytest.fail(f"C compiler {cc[0]!r} not found: tests/c/test_crc32.c needs cc (or $CC) and zlib headers")
    return cc


def _build(tmp_path, name, flags):
    exe = tmp_path / name
    cmd = [*_cc(), *flags, "-Wall", "-Werror", f"-I{SRC}", str(TEST_C), str(CRC_C), "-o", str(exe), "-lz"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, f"compile failed: {shlex.join(cmd)}\n{res.stdout}{res.stderr}"
    return exe


def _run(exe, impl=None, extra_env=None):
    env = dict(os.environ, **(extra_env or {}))
    env.pop("PYMQ_CRC32_IMPL", None)
    if impl:
        env["PYMQ_CRC32_IMPL"] = impl
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120, env=env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, f"{exe.name} (PYMQ_CRC32_IMPL={impl}) exited {res.returncode}:\n{out[-4000:]}"
    return re.search(r"implementation: (\S+)", out).group(1)


def _run_all_impls(exe, extra_env=None):
    best = _run(exe, extra_env=extra_env)
    assert best in IMPLS
    for impl in IMPLS[: IMPLS.index(best)]:
        assert _run(exe, impl, extra_env) == impl
    return best


def test_crc32_c_matches_zlib(tmp_path):
    best = _run_all_impls(_build(tmp_path, "test_crc32", ["-O2"]))
    if sys.platform.startswith("linux") and os.uname().machine == "x86_64":
        assert best != "slice-by-8", "x86-64 CPUs have PCLMULQDQ; the fast path was not selected"


def test_crc32_c_sanitizers(tmp_path):
    exe = _build(tmp_path, "test_crc32_asan",
                 ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"])
    _run_all_impls(exe, {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0"})


def test_crc32_c_portable_only_build(tmp_path):
    """The build other CPUs get (no x86 SIMD code) compiles cleanly and is correct."""
    assert _run(_build(tmp_path, "test_crc32_portable", ["-O2", "-DPYMQ_CRC32_PORTABLE_ONLY"])) == "slice-by-8"


def test_crc32_constants_are_generated():
    """The constants in pymq_crc32.c are exactly what ci/gen_crc32_constants.py prints."""
    gen = subprocess.run([sys.executable, str(GENERATOR)], capture_output=True, text=True, check=True).stdout
    assert gen.strip() in CRC_C.read_text(), "regenerate: python ci/gen_crc32_constants.py"

"""Build switches for pymq's compiled core; metadata lives in pyproject.toml.

Environment switches:
  PYMQ_DEBUG=1   annotate HTML, line tracing (CYTHON_TRACE_NOGIL) and the PYMQ_DEBUG C macro
  PYMQ_NATIVE=1  compile for this CPU (-march=native); wheels never use it
  PYMQ_ANNOTATE=1  Cython's annotate HTML (pymq/_core/*.html) without line tracing
  PYMQ_SYMBOLS=1   keep symbols and debug info (-g, not stripped) for callgrind / perf
"""

import glob
import os
import sys

from setuptools import Extension, setup

DEBUG = os.environ.get("PYMQ_DEBUG") == "1"
NATIVE = os.environ.get("PYMQ_NATIVE") == "1"
ANNOTATE = DEBUG or os.environ.get("PYMQ_ANNOTATE") == "1"
SYMBOLS = DEBUG or os.environ.get("PYMQ_SYMBOLS") == "1"

CFLAGS = ["-O3", "-Wall", "-Wno-unused-function", "-Wno-unreachable-code"]
if NATIVE:
    CFLAGS.append("-march=native")
if SYMBOLS:
    CFLAGS.append("-g")
MACROS = [("PYMQ_DEBUG", "1" if DEBUG else "0"), ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
if DEBUG:
    MACROS += [("CYTHON_TRACE_NOGIL", "1")]

CORE = "pymq/_core"
JOBS = os.cpu_count() or 1          # Cython translation and C compilation, one module per core


def ext(name, extra_sources=()):
    return Extension(
        f"pymq._core.{name}",
        [f"{CORE}/{name}.pyx", *extra_sources],
        include_dirs=[f"{CORE}/src"],
        depends=sorted(glob.glob(f"{CORE}/src/*.h")),    # an edited header rebuilds what includes it
        define_macros=MACROS,
        extra_compile_args=CFLAGS,
        extra_link_args=[] if SYMBOLS else ["-s"],
        libraries=["z"],
    )


EXTENSIONS = [
    ext("message"),
    ext("record", [f"{CORE}/src/pymq_crc32.c"]),
    ext("mapped_file"),
    ext("appender"),
    ext("cq_unit"),
    ext("dispatch"),
    ext("reader"),
    ext("index_file"),
    ext("index_builder"),
    ext("index_query"),
    ext("recent_keys"),
    ext("columns"),
    ext("body_source"),
    ext("put_bodies"),
    ext("read_batch"),
    ext("ha_wire"),
]


def cythonized():
    from Cython.Build import cythonize

    directives = {"language_level": "3", "embedsignature": True, "freethreading_compatible": False}
    if DEBUG:
        directives.update(linetrace=True, profile=True)
    return cythonize(EXTENSIONS, compiler_directives=directives, annotate=ANNOTATE, nthreads=JOBS)


if __name__ == "__main__":
    if sys.platform != "linux":
        print("pymq's core targets Linux (mmap, posix_fallocate, madvise)", file=sys.stderr)
    setup(ext_modules=cythonized(), options={"build_ext": {"parallel": JOBS}})

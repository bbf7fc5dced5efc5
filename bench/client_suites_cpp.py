"""RocketMQ's e2e suite for the 4.x C++ client (apache/rocketmq-e2e ``cpp/.../cpp4.x``, gtest)
for ``bench/client_suites.py``: built against rocketmq-client-cpp (``--cpp-client-ref``,
2.2.0 by default), then every test run in its own process against a server.

Building needs Debian's packages of the client's and the suite's libraries::

    apt-get install libboost-{atomic,thread,system,chrono,date-time,log,regex,serialization,\\
        filesystem,locale,iostreams}-dev libevent-dev libjsoncpp-dev libssl-dev zlib1g-dev \\
        libgtest-dev libspdlog-dev libfmt-dev cmake g++

The client's CMake expects its dependencies prebuilt in ``bin/include`` and ``bin/lib`` (its
``build.sh`` downloads and builds them); here those names point at Debian's shared
libraries, Boost.Log is linked dynamically (``BOOST_LOG_DYN_LINK``), and Boost 1.73+'s
missing ``boost/detail/endian.hpp`` is given back as a shim over ``boost/predef``. The
suite itself is built unchanged. It creates its topics by running
``common/bin/mqadmin updateTopic ... [-a +message.type=...]`` (mqadmin 5.x); that script is
replaced by one sending the same request (:func:`client_suites_env.mqadmin_main`), so it
works against pymq and RocketMQ 4.9.7 alike (4.9.7 ignores the attributes, as it does
from mqadmin 5.x). One process per test: the client sometimes dies in a test's teardown,
which would end a whole run.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

from client_suites_env import HERE, check, git_checkout

BOOST = ("atomic", "thread", "system", "chrono", "date_time", "log", "log_setup", "regex", "serialization",
         "filesystem", "locale", "iostreams")
OTHER = ("event", "event_core", "event_extra", "event_pthreads", "event_openssl", "ssl", "crypto", "jsoncpp")
SYSLIB = pathlib.Path("/usr/lib/x86_64-linux-gnu")
ENDIAN_SHIM = """// boost/detail/endian.hpp left Boost in 1.73; its macros, from boost/predef
#pragma once
#include <boost/predef/other/endian.h>
#if BOOST_ENDIAN_LITTLE_BYTE
#define BOOST_LITTLE_ENDIAN
#define BOOST_BYTE_ORDER 1234
#elif BOOST_ENDIAN_BIG_BYTE
#define BOOST_BIG_ENDIAN
#define BOOST_BYTE_ORDER 4321
#endif
"""
SUITE = pathlib.Path("cpp") / "rocketmq-client-cpp-tests" / "cpp4.x"


def build_client(git_url: str, ref: str, work: pathlib.Path) -> pathlib.Path:
    """rocketmq-client-cpp at ``ref``, built once; the folder holding ``librocketmq.so``."""
    src = work / "rocketmq-client-cpp"
    lib = src / "bin" / "librocketmq.so"
    if lib.exists():
        return lib.parent
    git_checkout(git_url, ref, src)
    (src / "bin" / "lib").mkdir(parents=True, exist_ok=True)
    if not (src / "bin" / "include").exists():
        (src / "bin" / "include").symlink_to("/usr/include")
    for name in [f"boost_{c}" for c in BOOST] + list(OTHER):
        link = src / "bin" / "lib" / f"lib{name}.a"          # the name its CMake links
        link.unlink(missing_ok=True)
        link.symlink_to(SYSLIB / f"lib{name}.so")
    shim = src / "src" / "common" / "boost" / "detail" / "endian.hpp"
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(ENDIAN_SHIM)
    cmake = src / "CMakeLists.txt"
    text = cmake.read_text()
    anchor = '    string(REPLACE ";" " " CMAKE_CXX_FLAGS "${CXX_FLAGS}")'
    if "BOOST_LOG_DYN_LINK" not in text:
        if anchor not in text:
            raise RuntimeError(f"rocketmq-client-cpp {ref}: CMakeLists.txt changed; no {anchor!r}")
        cmake.write_text(text.replace(anchor, '    list(APPEND CXX_FLAGS "-DBOOST_LOG_DYN_LINK")\n' + anchor))
    build = src / "build"
    build.mkdir(exist_ok=True)
    check(["cmake", "..", "-DBUILD_ROCKETMQ_STATIC=OFF", "-DCMAKE_BUILD_TYPE=Release"], cwd=build)
    check(["make", f"-j{os.cpu_count() or 2}", "rocketmq_shared"], cwd=build)
    return lib.parent


def build_suite(git_url: str, ref: str, work: pathlib.Path, client: pathlib.Path) -> pathlib.Path:
    """The e2e suite at ``ref`` built against ``client``; the cpp4.x folder (its binary,
    ``config.ini``) with the mqadmin stand-in in place."""
    root = work / "rocketmq-e2e"
    suite = root / SUITE
    if (suite / "rocketmq_test").exists():
        return suite
    git_checkout(git_url, ref, root)
    includes = work / "rocketmq-client-cpp-include"
    includes.mkdir(exist_ok=True)
    if not (includes / "rocketmq").exists():
        (includes / "rocketmq").symlink_to(client.parent / "include")   # it includes "rocketmq/DefaultMQProducer.h"
    mqadmin = root / "common" / "bin" / "mqadmin"
    mqadmin.write_text(f'#!/bin/sh\n# mqadmin 5.x updateTopic, the request it sends\n'
                       f'exec "{sys.executable}" "{HERE / "client_suites_env.py"}" mqadmin "$@"\n')
    build = suite / "build"
    build.mkdir(exist_ok=True)
    env = dict(os.environ, ROCKETMQ_CPP_LIB=str(client), ROCKETMQ_CPP_INC=str(includes))
    for cmd in (["cmake", ".."], ["make", f"-j{os.cpu_count() or 2}"]):
        p = subprocess.run(cmd, cwd=build, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode:
            raise RuntimeError(f"e2e build ({' '.join(cmd)}) failed:\n{p.stdout.decode(errors='replace')[-3000:]}")
    return suite


def run_cpp_e2e(suite: pathlib.Path, client: pathlib.Path, server, out: pathlib.Path) -> dict:
    """Every test of the suite against ``server``, each in its own process (10 minutes at
    most); mocha-like counts."""
    config = suite / "config.ini"
    text = config.read_text()
    text = re.sub(r"(?m)^namesrv = .*$", f"namesrv = {server.namesrv}", text)
    config.write_text(re.sub(r"(?m)^brokerAddr = .*$", f"brokerAddr = {server.address}", text))
    (suite / "logs").mkdir(exist_ok=True)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(client), HOME=str(out / "home"))
    listing = subprocess.run([str(suite / "rocketmq_test"), "--gtest_list_tests"], cwd=suite, env=env,
                             capture_output=True, text=True).stdout
    tests, prefix = [], ""
    for line in listing.splitlines():
        if re.match(r"^\w+\.$", line):
            prefix = line
        elif re.match(r"^  \w+", line):
            tests.append(prefix + line.split()[0])
    failures = []
    for test in tests:
        log = out / f"{test}.log"
        try:
            subprocess.run([str(suite / "rocketmq_test"), f"--gtest_filter={test}"], cwd=suite, env=env,
                           stdout=open(log, "w"), stderr=subprocess.STDOUT, timeout=600)
        except subprocess.TimeoutExpired:
            pass
        text = log.read_text(errors="replace")
        if "[  PASSED  ] 1 test" not in text:
            failures.append(f"{test}: {failure_text(text)}")
    return {"passed": len(tests) - len(failures), "failed": len(failures), "pending": 0, "failures": failures}


def failure_text(log: str) -> str:
    """gtest's first failure (its place and the lines that say what), else why there is no
    result."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if re.search(r": Failure$", line):
            place = line.rsplit("/", 1)[-1].replace(": Failure", "")
            return f"{place}: " + " ".join(x.strip() for x in lines[i + 1:i + 4] if x.strip())[:240]
    return "no result (the process died or timed out)"

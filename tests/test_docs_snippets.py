"""The documentation's examples run: every ```python block of README.md and docs/*.md is
executed in a fresh interpreter whose working directory is an empty temporary directory,
and must finish by itself (exit status 0, no traceback on stderr, within the timeout).

A block may be preceded by HTML comments (invisible on the rendered page) that say how it
runs; each comment sits on the lines right above the opening fence:

``<!-- snippet: continue -->``
    runs in the same interpreter as the page's previous python block, after it (the
    blocks of a page that build on each other, such as the Spark page's)
``<!-- snippet: setup CODE -->``
    CODE runs first: for a fragment that uses what the page's prose names (``store``,
    ``broker``, ``msg``); the fragment itself runs unchanged
``<!-- snippet: after CODE -->``
    CODE runs after the block (to call the hooks a config file defines, say)
``<!-- snippet: expect TEXT -->``
    the program's output must contain TEXT (what the block's comments say it prints)
``<!-- snippet: server -->``
    needs ``pymq serve``: the test starts one on free ports and points the block's
    ``127.0.0.1:8081`` (gRPC), ``:9876`` (name server) and ``:10911`` (broker) at it
``<!-- snippet: skip REASON -->``
    not run; the reason is required and the test lists it

Shell blocks are not run; ``test_shell_blocks_name_real_commands`` checks that every
``pymq COMMAND`` they show is a command of the CLI. A traceback points at the page and
line of the block (``docs/aio.md:12``).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))]

TIMEOUT_S = 90            # one program; a block that waits for an end that never comes fails here
SPARK_TIMEOUT_S = 300     # a JVM, a SparkSession and a few jobs: ~30 CPU-s for docs/spark.md
WORKERS = 3               # programs at once (a JVM keeps ~1.1 cores busy: the two Spark ones overlap)

FENCE = re.compile(r"^(\s*)```([\w+-]*)\s*$")
DIRECTIVE = re.compile(r"<!--\s*snippet:\s*([\w-]+)(.*?)-->", re.S)
KINDS = {"continue", "setup", "after", "expect", "server", "skip"}

#: python blocks must not touch absolute paths such as /data/store: they run in a temp dir
ABSOLUTE_PATH = re.compile(r"""["'](/(?!dev/null)[\w.-]+)+/?["']""")


@dataclasses.dataclass
class Block:
    page: str
    line: int               # line of the opening fence (1-based)
    lang: str
    code: str
    directives: list[tuple[str, str]]

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def directive(self, kind: str) -> list[str]:
        return [arg for k, arg in self.directives if k == kind]


def parse(page: str) -> list[Block]:
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        lines = f.read().split("\n")
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.groups()
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        assert j < len(lines), f"{page}:{i + 1}: a code block that is never closed"
        code = textwrap.dedent("\n".join(lines[i + 1:j]))
        # the HTML comments that end right above the fence, bottom up
        comments: list[str] = []
        k = i - 1
        while k >= 0 and lines[k].strip().endswith("-->"):
            start = k
            while start >= 0 and "<!--" not in lines[start]:
                start -= 1
            assert start >= 0, f"{page}:{k + 1}: '-->' without '<!--'"
            comments.insert(0, "\n".join(lines[start:k + 1]))
            k = start - 1
        directives = []
        for comment in comments:
            for kind, arg in DIRECTIVE.findall(comment):
                directives.append((kind, textwrap.dedent(arg.strip("\n")).strip() if kind in ("setup", "after")
                                   else arg.strip()))
        out.append(Block(page, i + 1, lang, code, directives))
        i = j + 1
    return out


BLOCKS = [b for page in PAGES for b in parse(page)]
PYTHON = [b for b in BLOCKS if b.lang == "python"]


@dataclasses.dataclass
class Program:
    """Blocks of one page run in one interpreter: a block and the ``continue`` ones after it."""
    blocks: list[Block]

    @property
    def where(self) -> str:
        return self.blocks[0].where

    @property
    def needs_server(self) -> bool:
        return any(b.directive("server") for b in self.blocks)

    @property
    def uses_spark(self) -> bool:
        return any("spark" in b.code for b in self.blocks)

    def chunks(self, endpoints: dict[str, str]) -> list[tuple[str, int, str]]:
        """(file name for tracebacks, first line, code) in the order they run."""
        out = []
        for b in self.blocks:
            for setup in b.directive("setup"):
                out.append((f"{b.page} (setup of line {b.line})", 1, setup))
            code = b.code
            for default, real in endpoints.items():
                code = code.replace(default, real)
            out.append((b.page, b.line + 1, code))
            for after in b.directive("after"):
                out.append((f"{b.page} (after line {b.line})", 1, after))
        return out


def programs() -> list[Program]:
    out: list[Program] = []
    for b in PYTHON:
        if b.directive("skip"):
            continue
        if b.directive("continue"):
            assert out and out[-1].blocks[0].page == b.page, f"{b.where}: 'continue' with no block before it"
            out[-1].blocks.append(b)
        else:
            out.append(Program([b]))
    return out


PROGRAMS = programs()

#: runs the chunks in one namespace; line numbers in tracebacks are the page's
RUNNER = r"""
import json, sys
namespace = {"__name__": "__main__"}
for name, first_line, code in json.load(open(sys.argv[1])):
    exec(compile("\n" * (first_line - 1) + code, name, "exec"), namespace)
"""


def run_program(program: Program, endpoints: dict[str, str], workdir: str) -> tuple[int, str, str, float]:
    for name, _line, code in program.chunks(endpoints):
        m = ABSOLUTE_PATH.search(code)
        if m:       # not run: it would write outside the temp dir (see test_python_blocks_use_relative_paths)
            return -1, "", f"{name}: absolute path {m.group(0)}; not run", 0.0
    os.makedirs(workdir)
    chunks_file = os.path.join(workdir, "..", os.path.basename(workdir) + ".json")
    with open(chunks_file, "w") as f:
        json.dump(program.chunks(endpoints), f)
    env = dict(os.environ)
    # pymq from this checkout (an installed copy is the same in CI: pip install -e)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    # as the Spark tests do (tests/spark/conftest.py): no DNS query, workers on this Python
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    # a JVM that lives for seconds: no C2 compiler, no parallel GC threads (~40 % less CPU)
    env.setdefault("PYSPARK_SUBMIT_ARGS", '--driver-java-options "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC" pyspark-shell')
    timeout = SPARK_TIMEOUT_S if program.uses_spark else TIMEOUT_S
    t0 = time.monotonic()
    # a session of its own, so that a timeout ends the program's JVM and workers too
    p = subprocess.Popen([sys.executable, "-c", RUNNER, chunks_file], cwd=workdir, env=env, text=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        return -1, out, err + f"\n[did not finish within {timeout} s]", time.monotonic() - t0
    return p.returncode, out, err, time.monotonic() - t0


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """Starts every selected program on a small pool, those using Spark first (they take
    longest), and yields their futures; ``pymq serve`` runs while the module's tests do."""
    from serve_process import ServeProcess, free_port

    selected = {item.callspec.params["program"].where for item in request.session.items
                if hasattr(item, "callspec") and "program" in item.callspec.params}
    todo = [(n, p) for n, p in enumerate(PROGRAMS) if p.where in selected]
    base = tmp_path_factory.mktemp("snippets")
    server = None
    endpoints: dict[str, str] = {}
    if any(p.needs_server for _n, p in todo):
        ports = {"8081": free_port(), "9876": free_port(), "10911": free_port()}
        server = ServeProcess(str(base / "served-store"), "--port", str(ports["8081"]),
                              "--namesrv-port", str(ports["9876"]), "--broker-port", str(ports["10911"]),
                              # a fixed broker port also takes port - 2 (VIP) and + 1 (HA), which
                              # the other picked ports may be: the snippets need neither
                              "--vip-port", "off", "--ha-port", "off").start()
        endpoints = {f"127.0.0.1:{default}": f"127.0.0.1:{port}" for default, port in ports.items()}
    pool = ThreadPoolExecutor(WORKERS)
    futures: dict[str, Future] = {}
    for n, program in sorted(todo, key=lambda np: (not np[1].uses_spark, np[0])):
        futures[program.where] = pool.submit(run_program, program, endpoints if program.needs_server else {},
                                             str(base / f"p{n:02d}"))
    try:
        yield futures
    finally:
        pool.shutdown(wait=True)
        if server is not None:
            server.stop()


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.where for p in PROGRAMS])
def test_python_block_runs(program, runs):
    code, out, err, seconds = runs[program.where].result()
    blocks = ", ".join(b.where for b in program.blocks)
    assert code == 0, f"{blocks} exited {code} after {seconds:.1f} s:\n{out[-3000:]}\n{err[-6000:]}"
    assert "Traceback (most recent call last)" not in err, f"{blocks}: a traceback on stderr:\n{err[-6000:]}"
    for b in program.blocks:
        for text in b.directive("expect"):
            assert text in out, f"{b.where}: printed no {text!r}:\n{out[-3000:]}"


def test_directives_are_known_and_skips_rare():
    for b in BLOCKS:
        for kind, arg in b.directives:
            assert kind in KINDS, f"{b.where}: unknown snippet directive {kind!r} (known: {sorted(KINDS)})"
            assert b.lang == "python", f"{b.where}: a snippet directive on a {b.lang or 'plain'} block"
            if kind == "skip":
                assert len(arg) >= 10, f"{b.where}: a skip needs a written reason"
            if kind in ("setup", "after"):
                compile(arg, b.where, "exec")
    skipped = [b.where for b in PYTHON if b.directive("skip")]
    assert len(skipped) <= 2, f"skips must be rare: {skipped}"
    assert len(PYTHON) >= 19, [b.where for b in PYTHON]      # the parser found the blocks


def test_python_blocks_use_relative_paths():
    """The blocks run in a temp directory, as they would in a reader's working directory;
    an absolute path (/data/store) would need root there and would write outside it."""
    for b in PYTHON:
        for text in [b.code, *b.directive("setup"), *b.directive("after")]:
            m = ABSOLUTE_PATH.search(text)
            assert m is None, f"{b.where}: absolute path {m.group(0)} in a python block"


def _cli_commands() -> set[str]:
    sys.path.insert(0, ROOT)
    from pymq.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return set(sub.choices)


def test_shell_blocks_name_real_commands():
    """Shell blocks are not run (they serve, benchmark for minutes or need a machine's
    directories); every ``pymq COMMAND`` in them, and in ``pymq ...`` lines of plain
    blocks, must be a command the CLI has."""
    commands = _cli_commands()
    seen = 0
    for b in BLOCKS:
        if b.lang not in ("", "sh", "bash", "console", "shell"):
            continue
        for line in b.code.split("\n"):
            m = re.search(r"(?:^|[\s;&|])pymq((?:\s+--store(?:\s+|=)\S+)?)\s+([a-z][\w-]*)", line)
            if m is None or line.lstrip().startswith("#"):
                continue
            seen += 1
            assert m.group(2) in commands, f"{b.where}: `pymq {m.group(2)}` is not a pymq command: {line.strip()}"
    assert seen >= 10, seen

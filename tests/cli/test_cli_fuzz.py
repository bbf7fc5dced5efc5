"""Every ``pymq`` sub-command, enumerated from the parser (a new one is covered without
editing this file), with missing, malformed and hostile arguments: never a traceback, and
the exit code ``pymq --help`` documents (2 and one line on stderr for a bad argument or no
store; 0 or 1, found or not, for a well-formed query).

Most cases run in-process through ``cli.main(argv)`` (argv as Python decodes it: bytes
that are not UTF-8 arrive as surrogate escapes); the cases only a real process shows (exit
codes, argv bytes, a closed pipe, the environment) run ``python -m pymq`` in parallel.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest

from pymq import cli
from cli_support import child_env, make_store, pymq_command, run_pymq
from conftest import small_config

#: commands that run until stopped when their arguments are good: only arguments argparse
#: must refuse are tried on them
LONG_RUNNING = {"serve", "bench"}
#: what a good base command line needs beyond its required options (finite, harmless)
EXTRA = {"stats": ["--sample", "0"], "top": ["--iterations", "1", "--interval", "0.01"], "resend-dlq": ["--all"]}
#: the value of a required option, by its dest (delete-topic deletes the topic the others do not read)
GOOD = {"topic": "TopicTest", "key": "order-5", "group": "g1", "queue_id": "1", "offset": "1"}
GOOD_FOR = {"delete-topic": {"topic": "Other"}}

NOT_UTF8 = "\udcff\udcfe"                      # b"\xff\xfe" as argv decodes it
MALFORMED_NUMBERS = ["", "abc", NOT_UTF8, "1e999x", "0x1G"]
HOSTILE = {
    "int": ["-1", "2147483648", "99999999999999999999999", "-99999999999999999999999", " 3 "],
    "float": ["nan", "inf", "-inf", "-1", "1e999", "1e-300"],
    "time": ["yesterday", "2024-13-45#25:61:61:999", "-1", "99999999999999999999999", "9999-12-31#23:59:59:999",
             NOT_UTF8],
    "text": ["", " ", "../../../outside", "x" * 5000, NOT_UTF8, "TopicTest\x00", "%DLQ%g1", "*", "-"],
}
BAD_IDS = ["", "XYZ", "7F00000100002A9F000000000000000A", "F" * 32, "0" * 56, "g" * 32, NOT_UTF8]


def _subcommands() -> dict:
    parser = cli.build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


COMMANDS = _subcommands()


def _options(sub: argparse.ArgumentParser) -> list:
    return [a for a in sub._actions if a.option_strings and a.dest not in ("help", "store")]


def _kind(action) -> str:
    name = getattr(action.type, "__name__", "")
    if name in ("int", "_port"):
        return "int"
    return name if name in ("float", "time") else "text"


def _takes_value(action) -> bool:
    return action.nargs != 0


def _base(name: str, msg_id: str) -> list:
    """A good command line of ``name``: its required options, then :data:`EXTRA`."""
    values = {**GOOD, "msg_id": msg_id, **GOOD_FOR.get(name, {})}
    argv = [name]
    for action in _options(COMMANDS[name]):
        if action.required:
            assert action.dest in values, f"pymq {name}: give the fuzz test a good value for {action.dest}"
            argv += [action.option_strings[0], values[action.dest]]
    return argv + EXTRA.get(name, [])


def _replace(argv: list, action, value: str) -> list:
    """``argv`` with ``action``'s option set to ``value`` (added when absent)."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in action.option_strings:
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out + [action.option_strings[0], value]


def _cases(store: str, msg_id: str, outside: dict) -> list:
    """``(argv, codes allowed)`` of every sub-command."""
    cases = []
    for name, sub in COMMANDS.items():
        base = _base(name, msg_id)
        cases.append((["--store", store, *base, "--no-such-flag"], {2}))
        cases.append((["--store", store, name, "--no-such-flag", "x"], {2}))
        if any(a.required for a in _options(sub)):
            cases.append((["--store", store, name], {2}))                    # required options missing
        for action in _options(sub):
            opt = action.option_strings[0]
            if not _takes_value(action):
                cases.append((["--store", store, *base, f"{opt}=1"], {2}))   # a flag given a value
                continue
            cases.append((["--store", store, *base, opt], {2}))             # the value missing
            if action.choices is not None:
                cases.append((["--store", store, *_replace(base, action, "no-such-choice")], {2}))
                continue
            kind = _kind(action)
            if kind in ("int", "float"):
                cases += [(["--store", store, *_replace(base, action, v)], {2}) for v in MALFORMED_NUMBERS]
            if name in LONG_RUNNING:
                continue
            values = BAD_IDS if action.dest == "msg_id" else HOSTILE[kind]
            cases += [(["--store", store, *_replace(base, action, v)], {0, 1, 2}) for v in values]
        if name in LONG_RUNNING:
            continue
        for bad_store in outside.values():
            cases.append((["--store", bad_store, *base], {2}))
        cases.append((["--store", "", *base], {2}))
        cases.append(([*base, "--store", outside["missing"]], {2}))          # --store after the command
        cases.append((["--store", store, *base], {0, 1}))                      # the good line itself
    return cases


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory):
    """A store deep in a directory of its own (whatever a hostile argument creates
    outside it shows up beside it), and paths that hold no store."""
    root = tmp_path_factory.mktemp("fuzz")
    store = root / "a" / "b" / "store"
    rs = make_store(str(store), small_config(), messages=1000)
    (root / "a-file").write_bytes(b"not a store\n")
    (root / "empty-dir").mkdir()
    outside = {"missing": str(root / "no-such-dir"), "file": str(root / "a-file"), "empty": str(root / "empty-dir"),
               "not-utf8": str(root / NOT_UTF8), "root": "/"}
    return root, str(store), rs, outside


def _listing(root) -> set:
    store = os.path.join(str(root), "a", "b", "store")
    return {os.path.join(d, f) for d, dirs, files in os.walk(str(root)) if not d.startswith(store)
            for f in files + dirs}


def test_every_subcommand_with_bad_arguments_in_process(fuzz_store, capfd):
    root, store, rs, outside = fuzz_store
    before = _listing(root)
    cases = _cases(store, rs[5].msg_id, outside)
    assert {argv[2] for argv in (c[0] for c in cases) if argv[0] == "--store"} >= set(COMMANDS)
    failures = []
    for argv, allowed in cases:
        code = cli.main(argv)
        out, err = capfd.readouterr()
        problem = None
        if "Traceback" in out + err or "internal error" in err:
            problem = "a traceback or an internal error"
        elif code not in allowed:
            problem = f"exit {code}, expected {sorted(allowed)}"
        elif code == 2 and len(err.strip().splitlines()) != 1:
            problem = "not one line on stderr"
        if problem:
            failures.append(f"pymq {' '.join(map(repr, argv))}: {problem}\n  stdout: {out[-300:]!r}\n  stderr: {err!r}")
    assert not failures, f"{len(failures)} of {len(cases)} cases:\n" + "\n".join(failures[:20])
    assert _listing(root) == before, "an argument made pymq write outside the store"


def test_real_processes_exit_codes_argv_bytes_and_the_environment(fuzz_store):
    """What only a process shows: the exit status, argv that is not UTF-8, PYMQ_STORE."""
    root, store, rs, outside = fuzz_store
    cases = [  # (argv, env, exit code, what stdout holds or stderr says)
        (["--store", store, "print-msg", "-t", "TopicTest", "-b", "yesterday"], {}, 2, "not a time"),
        (["--store", store, "topic-list", "--bogus"], {}, 2, "unrecognized arguments"),
        (["--store", outside["missing"], "topic-list"], {}, 2, "no store"),
        (["--store", outside["file"], "check"], {}, 2, "Not a directory"),
        (["--store", store, "query-msg-by-key", "-t", b"\xff\xfe", "-k", b"\xff"], {}, 2, "not UTF-8"),
        (["--store", store, "query-msg-by-id", "-i", "7F00000100002A9F000000000000000A"], {}, 1,
         "no message at that id"),
        (["topic-list", "--store", store], {}, 0, "TopicTest"),
        (["topic-list"], {"PYMQ_STORE": store}, 0, "TopicTest"),
        (["topic-status", "-t", "TopicTest", "--store", outside["missing"]], {"PYMQ_STORE": store}, 2, "no store"),
        (["consumer-progress", "-g", "nobody"], {"PYMQ_STORE": store}, 1, "no committed offsets"),
    ]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda c: run_pymq(*c[0], **c[1]), cases))
    for (argv, env, code, text), p in zip(cases, results):
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr, (argv, p.stderr)
        assert p.returncode == code, (argv, env, p.returncode, p.stdout[-300:], p.stderr)
        assert text in (p.stdout if code != 2 else p.stderr), (argv, p.stdout[-300:], p.stderr)
        if code == 2:
            assert len(p.stderr.strip().splitlines()) == 1, (argv, p.stderr)


def test_a_closed_pipe_ends_quietly(fuzz_store):
    """``pymq print-msg ... | head -1``: the reader goes away after a line; pymq stops
    without a word (exit 141, as a tool killed by SIGPIPE)."""
    _, store, _, _ = fuzz_store
    child = subprocess.Popen(pymq_command("--store", store, "print-msg", "-t", "TopicTest"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=child_env())
    first = child.stdout.readline()
    child.stdout.close()                 # 1000 lines are far more than a pipe buffers
    err = child.stderr.read()
    assert child.wait(timeout=60) == 141, err
    assert first.startswith(b"MSGID: ") and err == b""

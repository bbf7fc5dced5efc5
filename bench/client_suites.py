"""The official RocketMQ clients' own test suites against ``pymq serve`` (and, for the 4.x
remoting client, against Apache RocketMQ 4.9.7 as the reference), with the counts.

    python bench/client_suites.py [--work /tmp/client-suites] [--suites ali-ons,nodejs,python]
                                  [--servers pymq,rocketmq] [--ali-ons-git URL]
                                  [--clients-git URL] [--clients-ref REF] [--json out.json]

Not part of CI: it fetches the suites from their upstream repositories (git; npm for the
packages) into ``--work`` and runs them for minutes. The suites, at the versions this
repository uses:

- **ali-ons** (RocketMQ 4.x remoting, Node.js): its mocha tests at the tag of the version
  ``tests/remoting/js/package.json`` pins, from github.com/ali-sdk/ali-ons. Its tests talk
  to Aliyun's cloud; they are pointed at the server under test instead (the only edits):
  ``example/config.js``'s name server, the Aliyun name server one test names, and the
  name-server address service (``onsAddr``, served here by :class:`AddressServer`); three
  unreachable name servers of one test become closed loopback ports. The topic it uses is
  created first, as a RocketMQ user must (``mqadmin updateTopic``). Run against both
  servers.
- **rocketmq-clients' Node.js tests**: ``nodejs/test`` of github.com/apache/rocketmq-clients
  (``--clients-ref``) over the client sources of the npm package of the version
  ``tests/server/js/package.json`` pins. The topics are created as its CI script
  (``test/start-rocketmq.sh``) creates them, with 5.x's ``-a +message.type=...``. RocketMQ
  5's proxy is needed, so pymq only, run twice: as pymq starts by default, and with
  ``--no-auto-create-topic`` (RocketMQ 5's proxy never routes a topic that does not exist;
  pymq does while auto-creation is on). The counts are mocha's (the files written for
  ``node:test`` print TAP, client-side tests mocha does not count); the endpoint tests
  (the two files that talk to a server) are counted apart.
- **The Python client's examples**: ``python/example`` of the same repository, run with
  the installed ``rocketmq-python-client`` (pyproject.toml pins >=5.1.2). Edits: the
  endpoint; the transaction example sends to its own TRANSACTION topic, and the consumers
  get groups of their own (the examples share ``topic`` and ``consumer-group`` across
  message types, which RocketMQ 5 refuses); the lite consumer binds ``parent-topic``, the
  lite producer's. Consumers start first, then the producers run one by one; an example
  passes when it printed no exception and sent (or consumed) all its messages. pymq only.
- **RocketMQ's e2e suite for the 4.x C++ client** (``cpp-e2e``, github.com/apache/
  rocketmq-e2e ``cpp/rocketmq-client-cpp-tests/cpp4.x``), built against rocketmq-client-cpp
  2.2.0 with Debian's libraries (:mod:`client_suites_cpp` says which and how), each test in
  its own process. Run against both servers. Not in the default ``--suites``: building
  takes about 15 minutes and needs those packages.

Servers start fresh for each suite. Printed: a table of suite, server, passed/total and
each failure with its known cause (``KNOWN_CAUSES``), else "unexplained".
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import pathlib
import re
import shutil
import sys
import time

from client_suites_env import (REPO, AddressServer, PymqServe, check, create_topic, find_rocketmq_home,
                               git_checkout, mocha_report, node_env, npm_install, npm_version, rocketmq_server, run)
from client_suites_cpp import build_client, build_suite, run_cpp_e2e
from client_suites_python import run_python_examples

#: the failures seen and understood: (suite, words of the test's title) -> why it fails
KNOWN_CAUSES = {
    ("ali-ons", "should select another broker if one failed"):
        "needs two brokers: the test fails a send on purpose and expects the retry on another broker",
    ("ali-ons", "should invoke ok though channel not ready"):
        "Aliyun only: expects the cloud name server's '__accessKey is blank' for an unsigned request",
    ("ali-ons", "reconsumeTimes gt maxReconsumeTimes"):
        "timing: two redeliveries (10 s, 30 s) must land in a fixed 60 s window after a rebalance "
        "(seen failing on RocketMQ 4.9.7 only, once)",
    ("ali-ons", "should retry(fall to local) if process failed"):
        "timing: the message must come back within the test's 120 s after a re-subscription "
        "(seen failing on RocketMQ 4.9.7 only, once)",
    ("cpp-e2e", "BatchProducerTest"):
        "the client flags its batch m=1, which RocketMQ's broker reads as false (Boolean.parseBoolean): "
        "the batch is stored as one message, the consumer never gets the ten (fails on RocketMQ 4.9.7 alike)",
    ("cpp-e2e", "ClusterTest.testBroadcastConsume"):
        "race in the test: the second broadcast consumer starts from the last offset and may rebalance after "
        "the sends (fails on RocketMQ 4.9.7 and pymq alike, not every run)",
    ("nodejs", "should startup fail when topic not exists"):
        "pymq by default routes a topic that does not exist (gRPC auto-creation; RocketMQ 5's proxy: "
        "TOPIC_NOT_FOUND); with --no-auto-create-topic pymq answers as the proxy does, and the test fails as on "
        "RocketMQ 5: client 1.0.8 wraps the NotFoundException in 'Failed to fetch topic routes after 3 attempts', "
        "the test expects it unwrapped",
}


def cause(suite: str, title: str) -> str:
    for (s, words), why in KNOWN_CAUSES.items():
        if s == suite and words in title:
            return why
    return "unexplained"


def start(kind: str, args, run_dir: pathlib.Path, *pymq_extra: str):
    if kind == "pymq":
        return PymqServe(run_dir, *pymq_extra).start()
    home, why = find_rocketmq_home()
    if home is None:
        raise SystemExit(why)
    return rocketmq_server(home, run_dir).start()


# -- ali-ons -----------------------------------------------------------------------------------

ALI_ONS_EDITS = {
    "example/config.js": [("nameSrv: 'onsaddr.mq-internet-access.mq-internet.aliyuncs.com:80'",
                           "nameSrv: process.env.ONS_NAMESRV"),
                          ("onsAddr: 'http://onsaddr-internet.aliyun.com/rocketmq/nsaddr4client-internet'",
                           "onsAddr: process.env.ONS_ADDR")],
    "lib/client_config.js": [("onsAddr: 'http://onsaddr-internet.aliyun.com/rocketmq/nsaddr4client-internet'",
                              "onsAddr: process.env.ONS_ADDR")],
    "test/channel.test.js": [("const onsAddr = 'http://onsaddr-internet.aliyun.com/rocketmq/nsaddr4client-internet'",
                              "const onsAddr = process.env.ONS_ADDR")],
    "test/mq_client_api.test.js": [("'onsaddr.mq-internet-access.mq-internet.aliyuncs.com:80'",
                                    "process.env.ONS_NAMESRV"),
                                   ("'1.2.3.4:80', '2.3.4.5:80'", "'127.0.0.1:9', '127.0.0.1:7'"),
                                   ("'6.7.8.9:80'", "'127.0.0.1:13'")],
}


def prepare_ali_ons(args, work: pathlib.Path) -> tuple[pathlib.Path, str]:
    version = npm_version(REPO / "tests" / "remoting" / "js" / "package.json", "ali-ons")
    src = work / "ali-ons"
    commit = git_checkout(args.ali_ons_git, f"v{version}", src)
    for name, edits in ALI_ONS_EDITS.items():
        path = src / name
        text = path.read_text()
        for old, new in edits:
            if old not in text:
                raise RuntimeError(f"ali-ons {version}: {name} no longer holds {old!r}")
            text = text.replace(old, new)
        path.write_text(text)
    npm_install(src)
    return src, f"ali-ons {version} ({commit[:10]})"


def run_ali_ons(args, work: pathlib.Path, kind: str) -> dict:
    src = work / "ali-ons"
    server = start(kind, args, work / f"run-ali-ons-{kind}")
    addresses = AddressServer(server.namesrv)
    try:
        create_topic(server, "TP_alions_test_topic")
        home = work / f"home-ali-ons-{kind}"
        shutil.rmtree(home, ignore_errors=True)
        out = run([str(src / "node_modules" / ".bin" / "egg-bin"), "test"], cwd=src, timeout=1800,
                  env=node_env(home, ONS_NAMESRV=server.namesrv, ONS_ADDR=addresses.url, TEST_TIMEOUT="120000"),
                  log=work / f"ali-ons-{kind}.log")
    finally:
        addresses.close()
        server.stop()
    return mocha_report(out)


# -- rocketmq-clients' Node.js tests -------------------------------------------------------------

def prepare_nodejs(args, work: pathlib.Path) -> tuple[pathlib.Path, str]:
    version = npm_version(REPO / "tests" / "server" / "js" / "package.json", "rocketmq-client-nodejs")
    repo = work / "rocketmq-clients"
    commit = git_checkout(args.clients_git, args.clients_ref, repo)
    suite = work / "nodejs"
    suite.mkdir(exist_ok=True)
    for name in ("test", "src", "proto"):
        shutil.rmtree(suite / name, ignore_errors=True)
    shutil.copytree(repo / "nodejs" / "test", suite / "test")
    for name in ("tsconfig.json", "tsconfig.prod.json", ".eslintrc"):
        if (repo / "nodejs" / name).exists():
            shutil.copy(repo / "nodejs" / name, suite / name)
    # the client itself: the npm package of the pinned version (its sources and generated protos)
    pack = work / "npm-pack"
    shutil.rmtree(pack, ignore_errors=True)
    pack.mkdir()
    check(["npm", "pack", "--silent", f"rocketmq-client-nodejs@{version}"], cwd=pack)
    tgz, = pack.glob("*.tgz")
    check(["tar", "-xzf", tgz.name], cwd=pack)
    for name in ("src", "proto"):
        shutil.copytree(pack / "package" / name, suite / name)
    shutil.copy(pack / "package" / "package.json", suite / "package.json")
    npm_install(suite, "--ignore-scripts")      # grpc-tools' install script would fetch protoc
    return suite, f"rocketmq-client-nodejs {version} (npm) + nodejs/test of rocketmq-clients {commit[:10]}"


def start_script_topics(script: pathlib.Path) -> list:
    """(topic, attributes) of every ``mqadmin updatetopic`` line of the suite's CI script."""
    out = []
    for line in script.read_text().splitlines():
        if "updatetopic" in line.lower() and not line.lstrip().startswith("#"):
            topic = re.search(r"-t (\S+)", line).group(1)
            attrs = re.search(r"-a (\S+)", line)
            out.append((topic, attrs.group(1) if attrs else None))
    return out


ENDPOINT_FILES = ("test/producer/Producer.test.ts", "test/consumer/SimpleConsumer.test.ts")


def run_nodejs(args, work: pathlib.Path, kind: str, *pymq_extra: str) -> dict:
    suite = work / "nodejs"
    label = "-".join((kind,) + tuple(x.lstrip("-") for x in pymq_extra))
    server = start(kind, args, work / f"run-nodejs-{label}", *pymq_extra)
    try:
        for topic, attributes in start_script_topics(suite / "test" / "start-rocketmq.sh"):
            create_topic(server, topic, attributes=attributes)
        out = run([str(suite / "node_modules" / ".bin" / "egg-bin"), "test"], cwd=suite, timeout=1800,
                  env=node_env(work / f"home-nodejs-{label}", ROCKETMQ_NODEJS_CLIENT_ENDPOINTS=server.endpoint),
                  log=work / f"nodejs-{label}.log")
    finally:
        server.stop()
    report = mocha_report(out)
    report["endpoint"] = endpoint_counts(out)
    return report


def endpoint_counts(output: str) -> dict:
    """Passed and failed tests of the two files that talk to a server, from the spec tree
    (each file's top suite is titled with its path)."""
    passed = failed = 0
    current = None
    for line in re.sub(r"\x1b\[[0-9;]*m", "", output).splitlines():
        if re.match(r"^  [^\s#.\-\d]", line) and not re.match(r"^  (duration_ms|type):", line):
            current = line.strip()          # a file's suite (node:test's TAP lines come between)
        elif current in ENDPOINT_FILES:
            if re.match(r"^\s+[✔✓] ", line):
                passed += 1
            elif re.match(r"^\s+\d+\) ", line):
                failed += 1
        if re.search(r"^\s+\d+ passing", line):
            break
    return {"passed": passed, "failed": failed}


# -- the table ---------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/client-suites")
    ap.add_argument("--suites", default="ali-ons,nodejs,python")
    ap.add_argument("--servers", default="pymq,rocketmq", help="rocketmq: only for ali-ons (4.x)")
    ap.add_argument("--ali-ons-git", default="https://github.com/ali-sdk/ali-ons.git")
    ap.add_argument("--clients-git", default="https://github.com/apache/rocketmq-clients.git")
    ap.add_argument("--clients-ref", default="master", help="rocketmq-clients commit, tag or branch")
    ap.add_argument("--e2e-git", default="https://github.com/apache/rocketmq-e2e.git")
    ap.add_argument("--e2e-ref", default="master")
    ap.add_argument("--cpp-client-git", default="https://github.com/apache/rocketmq-client-cpp.git")
    ap.add_argument("--cpp-client-ref", default="2.2.0")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--table", metavar="JSON", help="only print the table of an earlier run's --json")
    args = ap.parse_args()
    if args.table:
        done = json.loads(pathlib.Path(args.table).read_text())
        print_table(done["rows"], done["sources"])
        return
    work = pathlib.Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    suites, servers = args.suites.split(","), args.servers.split(",")
    rows, sources = [], {}
    if "ali-ons" in suites:
        sources["ali-ons"] = prepare_ali_ons(args, work)[1]
        for kind in servers:
            rows.append(("ali-ons", kind, run_ali_ons(args, work, kind)))
    if "nodejs" in suites:
        sources["nodejs"] = prepare_nodejs(args, work)[1]
        if "pymq" in servers:
            # RocketMQ 5's proxy never routes a topic that does not exist; pymq does while
            # auto-creation is on (its default), so the suite runs both ways
            rows.append(("nodejs", "pymq", run_nodejs(args, work, "pymq")))
            rows.append(("nodejs", "pymq --no-auto-create-topic",
                         run_nodejs(args, work, "pymq", "--no-auto-create-topic")))
    if "python" in suites:
        if "nodejs" not in suites:
            git_checkout(args.clients_git, args.clients_ref, work / "rocketmq-clients")
        version = importlib.metadata.version("rocketmq-python-client")
        sources["python"] = f"rocketmq-python-client {version} (installed) + python/example of rocketmq-clients"
        if "pymq" in servers:
            server = PymqServe(work / "run-python-pymq", "--transaction-check-interval", "5000").start()
            try:
                rows.append(("python", "pymq", run_python_examples(server, work / "rocketmq-clients" / "python" /
                                                                   "example", work / "python-examples")))
            finally:
                server.stop()
    if "cpp-e2e" in suites:
        client = build_client(args.cpp_client_git, args.cpp_client_ref, work)
        suite = build_suite(args.e2e_git, args.e2e_ref, work, client)
        sources["cpp-e2e"] = f"rocketmq-e2e cpp4.x ({args.e2e_ref}) on rocketmq-client-cpp {args.cpp_client_ref}"
        for kind in servers:
            server = start(kind, args, work / f"run-cpp-e2e-{kind}")
            try:
                rows.append(("cpp-e2e", kind, run_cpp_e2e(suite, client, server, work / f"cpp-e2e-{kind}")))
            finally:
                server.stop()
    print_table(rows, sources)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"sources": sources, "rows": rows}, indent=1))


def print_table(rows: list, sources: dict) -> None:
    print(f"\nclient suites, {time.strftime('%Y-%m-%d %H:%M')}")
    for name, what in sources.items():
        print(f"  {name}: {what}")
    print("\n| suite | server | passed / total | pending | failures (cause) |\n|---|---|---|---|---|")
    for suite, kind, r in rows:
        total = r["passed"] + r["failed"]
        fails = "; ".join(f"{t} ({cause(suite, t)})" for t in r["failures"]) or "-"
        print(f"| {suite} | {kind} | {r['passed']} / {total} | {r.get('pending', 0)} | {fails} |")
        if "endpoint" in r:
            e = r["endpoint"]
            print(f"| {suite}: endpoint tests | {kind} | {e['passed']} / {e['passed'] + e['failed']} | | |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

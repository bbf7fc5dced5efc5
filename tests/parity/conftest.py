"""The parity suite: each test runs the same steps with RocketMQ's own tools (the official
Java 4.9.7 client and mqadmin, :mod:`real_rocketmq`'s ``RmqProbe``) against Apache RocketMQ
4.9.7 and against ``pymq serve``, and asserts the same outcome on both.

The distribution comes from ``PYMQ_ROCKETMQ_HOME`` (``ci/test.sh`` points it at
``../shared/rocketmq-4.9.7``); without one the tests skip, naming the variable. Each
counterpart is started once per module: ``counterpart`` is parametrized over
``rocketmq`` and ``pymq``, so a test runs twice and its id says against which. A module
that needs both started otherwise (shorter delay levels, say) overrides
``counterpart_options``.
"""

from __future__ import annotations

import pathlib

import pytest

from serve_process import ServeProcess  # tests/ is on sys.path


def pytest_collection_modifyitems(items):
    for item in items:
        if "/parity/" in str(item.fspath):
            item.add_marker(pytest.mark.parity)


class PymqCounterpart:
    """``pymq serve`` with its name server and broker on free ports, shaped like
    :class:`real_rocketmq.RealBroker` for ``Probe.run`` (``namesrv``, ``address``,
    ``run_dir``, ``log_tail``)."""

    kind = "pymq"

    def __init__(self, run_dir: pathlib.Path, *extra: str) -> None:
        self.run_dir = run_dir
        self.store = run_dir / "store"
        self.proc = ServeProcess(str(self.store), "--port", "off", "--namesrv-port", "0", "--broker-port", "0",
                                 *extra)

    def start(self) -> "PymqCounterpart":
        self.proc.start()
        return self

    def stop(self) -> None:
        self.proc.stop()

    @property
    def namesrv(self) -> str:
        return self.proc.listening["namesrv"]

    @property
    def address(self) -> str:
        return self.proc.listening["broker"]

    def log_tail(self, *args, **kwargs) -> str:
        return "".join(self.proc.output[-40:])


@pytest.fixture(scope="module")
def counterpart_options() -> dict:
    """How the module's counterparts start: ``{"rocketmq": {broker.conf key: value},
    "pymq": [pymq serve options]}``, the same behaviour asked of both. A module overrides
    this fixture to change it."""
    return {"rocketmq": {}, "pymq": []}


@pytest.fixture(scope="module", params=["rocketmq", "pymq"])
def counterpart(request, rocketmq_home, tmp_path_factory, counterpart_options):
    """A started RocketMQ 4.9.7 broker (with its name server), or a started ``pymq serve``."""
    from real_rocketmq import RealBroker
    run = tmp_path_factory.mktemp(f"parity-{request.param}")
    if request.param == "rocketmq":
        server = RealBroker(rocketmq_home, run / "run", run / "store", conf=counterpart_options["rocketmq"])
        server.kind = "rocketmq"
    else:
        server = PymqCounterpart(run, *counterpart_options["pymq"])
    try:
        server.start()
        yield server
    finally:
        server.stop()          # also what a failed start got to (the name server alone)


@pytest.fixture
def probe(rocketmq_probe, counterpart):
    """``probe(plan, allow_errors=False)``: the plan's results from RmqProbe against the
    counterpart."""
    def run(plan: list, allow_errors: bool = False) -> list:
        return rocketmq_probe.run(counterpart, plan, allow_errors=allow_errors)
    return run

"""The wheel: built from this tree, installed into a fresh virtual environment without
Cython, it works (a put/get round trip) and carries the compiled core and its stubs."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ROUND_TRIP = r"""
import importlib.util, sys, tempfile
import pymq
assert pymq.__file__.startswith(sys.prefix), f"imported {pymq.__file__}, not the installed wheel"
assert importlib.util.find_spec("Cython") is None, "Cython must not be needed at run time"
assert pymq._core.COMPILED
with pymq.MessageStore(tempfile.mkdtemp(), pymq.StoreConfig(commitlog_file_size=1 << 20)) as s:
    r = s.put_message(pymq.Message(topic="WheelTest", body=b"hello", tags="TagA", keys=["k1"]))
    assert r.status is pymq.PutMessageStatus.PUT_OK, r
    assert s.wait_message("WheelTest", 0, 0, 5.0)
    g = s.get_message("g", "WheelTest", 0, 0)
    assert [m.body for m in g.messages] == [b"hello"], g
    assert s.query_message("WheelTest", "k1")[0].tags == "TagA"
print("ROUND TRIP OK", pymq.__version__)
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    p = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(out), ROOT],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    wheels = list(out.glob("pymq_store-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_contents(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for mod in ("message", "record", "mapped_file", "appender", "cq_unit", "dispatch", "reader", "index_file"):
        assert any(n.startswith(f"pymq/_core/{mod}.") and n.endswith(".so") for n in names), mod
    assert "pymq/py.typed" in names and "pymq/_core/message.pyi" in names
    assert not any(n.endswith((".pyx", ".c")) for n in names)


def clean_env() -> dict:
    """The environment without anything that points Python at this checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def venv_with(wheel, tmp_path) -> str:
    """A fresh virtual environment in ``tmp_path`` with ``wheel`` installed; its python."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = str(env_dir / "bin" / "python")
    p = subprocess.run([python, "-m", "pip", "install", "--quiet", str(wheel)],
                       capture_output=True, text=True, timeout=600, env=clean_env(), cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return python


def test_wheel_installs_and_works_without_cython(wheel, tmp_path):
    python = venv_with(wheel, tmp_path)
    env_dir = tmp_path / "venv"
    p = subprocess.run([python, "-c", ROUND_TRIP], capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path), env=clean_env())     # the installed copy, not the source tree
    assert p.returncode == 0 and "ROUND TRIP OK" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([str(env_dir / "bin" / "pymq"), "--version"], capture_output=True, text=True,
                       env=clean_env(), cwd=str(tmp_path))
    assert p.returncode == 0 and "pymq" in p.stdout


def test_an_extra_on_top_of_the_installed_core_adds_only_its_dependencies(wheel, tmp_path):
    """``pip install "pymq-store[server]"`` where the same pymq-store is installed: pip
    plans the extra's dependencies only, neither reinstalling nor building the core (the
    README's promise: extras never rebuild it). The plan comes from ``--dry-run --report``
    against the package index, with this wheel as the installed version."""
    import json
    python = venv_with(wheel, tmp_path)
    report = tmp_path / "plan.json"
    p = subprocess.run([python, "-m", "pip", "install", "--quiet", "--dry-run", "--report", str(report),
                        "--find-links", str(wheel.parent), "pymq-store[server]"],
                       capture_output=True, text=True, timeout=600, env=clean_env(), cwd=str(tmp_path))
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    planned = {item["metadata"]["name"].lower() for item in json.loads(report.read_text())["install"]}
    assert "pymq-store" not in planned and {"grpcio", "protobuf"} <= planned, planned

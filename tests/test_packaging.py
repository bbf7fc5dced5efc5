"""The distribution's name and extras: ``pymq`` on the package index is someone else's
project, so ours is ``pymq-store`` (import name and command ``pymq``); no install line in
the documentation may send a reader to the other one, and ``pip install -e ".[dev]"``
installs every extra in one build of the core."""

from __future__ import annotations

import glob
import os
import re

try:
    import tomllib
except ImportError:             # Python 3.10: pytest itself depends on tomli there
    import tomli as tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "pymq-store"

with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    PROJECT = tomllib.load(f)["project"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]

#: the pages a newcomer installs from
PAGES = ["README.md", "bench/README.md", *sorted(glob.glob("docs/*.md", root_dir=ROOT))]

#: a pip install naming the bare ``pymq`` (any options before it, quoted or not, with
#: extras or a version): `pip install pymq`, `pip install "pymq[server]"`, `pip install -U 'pymq==1'`
OLD_INSTALL = re.compile(r"""pip3?\s+install\s+(?:-\S+\s+)*["']?pymq(?![\w-])""")
#: the old name with extras anywhere (`pymq[spark]` in prose); `pymq-store[spark]` is fine
OLD_EXTRA = re.compile(r"(?<![\w.-])pymq\[")


def old_install_lines(text: str) -> list[str]:
    found = []
    for n, line in enumerate(text.split("\n"), 1):
        if OLD_INSTALL.search(line) or OLD_EXTRA.search(line):
            found.append(f"{n}: {line.strip()}")
    return found


def test_the_checker_finds_the_old_lines():
    bad = ['pip install "pymq[server]"', "pip install pymq", "  pip install -U 'pymq[bench]'  # x",
           "(`pip install pymq==0.7.0`)", "needs `pymq[spark]`", "pip3 install --user pymq"]
    good = ['pip install "pymq-store[server]"', "pip install pymq-store", 'pip install -e ".[dev]"',
            "pip install -e .", "pymq serve --store ./store", "pip install pymq_store-0.1.0-cp311.whl"]
    assert [line for line in bad if not old_install_lines(line)] == []
    assert [line for line in good if old_install_lines(line)] == []


def test_no_page_installs_the_other_pymq():
    found = {}
    for page in PAGES:
        with open(os.path.join(ROOT, page), encoding="utf-8") as f:
            lines = old_install_lines(f.read())
        if lines:
            found[page] = lines
    assert found == {}, f'install lines naming "pymq" (an unrelated project on the index); use {NAME}: {found}'


def test_name_command_and_package():
    assert PROJECT["name"] == NAME
    assert PROJECT["scripts"] == {"pymq": "pymq.cli:main"}
    assert os.path.isfile(os.path.join(ROOT, "pymq", "__init__.py"))


def _expand(extra: str, seen: frozenset = frozenset()) -> set[str]:
    """The requirements an extra brings, its references to the project's own extras expanded."""
    out = set()
    for spec in EXTRAS[extra]:
        req = Requirement(spec)
        assert canonicalize_name(req.name) != "pymq", f"[{extra}] {spec!r} names the unrelated pymq"
        if canonicalize_name(req.name) == NAME:
            for sub in req.extras:
                assert sub in EXTRAS and sub not in seen, f"[{extra}] {spec!r}: no extra {sub!r} (or a cycle)"
                out |= _expand(sub, seen | {extra})
        else:
            out.add(str(req))
    return out


def test_dev_extra_installs_every_extra():
    dev = _expand("dev")
    for extra in ("server", "spark", "bench", "test"):
        missing = _expand(extra) - dev
        assert not missing, f"pip install -e '.[dev]' lacks the {extra} extra's {sorted(missing)}"


def test_ci_installs_the_dev_extra():
    """CI installs what the README tells a contributor to install, in one build."""
    with open(os.path.join(ROOT, "ci", "test.sh"), encoding="utf-8") as f:
        script = f.read()
    installs = re.findall(r"pip install[^\n]*-e\s+\"\.\[([\w,]+)\]\"", script)
    assert installs == ["dev"], installs

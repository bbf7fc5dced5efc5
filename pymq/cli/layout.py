"""Text of ``pymq`` that fits the width it is shown in.

The width is the terminal's when standard output is one (``COLUMNS`` first, as
:func:`shutil.get_terminal_size` has it), else 80, or ``COLUMNS`` when that is wider (a
pipe has no width of its own). Tables keep whole columns: a cell too wide for its column
is cut at a word boundary where there is one and ends in an ellipsis; identifiers (message
ids, topics, numbers) keep their full width as long as the free-text columns can give
way, shortened and, when even short they do not fit, left out (``--json`` has every
field). Long lines (``stats``, ``top``, a check report) wrap between words under a hanging
indent, never inside a word.
"""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
from collections.abc import Iterable, Sequence

__all__ = ["fit_table", "output_width", "wrap_line"]

#: the narrowest a squeezed column gets (its header may be cut to it)
MIN_COLUMN = 6
GAP = "  "


def output_width() -> int:
    """Columns available on standard output (see the module's docstring)."""
    try:
        env = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        env = 0
    out = sys.stdout
    try:
        tty = out is not None and out.isatty()
    except (ValueError, AttributeError):       # closed or replaced by something without isatty
        tty = False
    if tty:
        return max(shutil.get_terminal_size((80, 24)).columns, 20)
    return max(80, env)


def _ellipsis() -> str:
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "…".encode(encoding)
        return "…"
    except (UnicodeError, LookupError):
        return "~"


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` columns: whole when it fits, else cut after its last
    word that fits (inside a word only when the first word alone is too long), with an
    ellipsis."""
    if len(text) <= width:
        return text
    mark = _ellipsis()
    room = width - len(mark)
    if room <= 0:
        return text[:width]
    space = text.rfind(" ", 0, room + 1)
    head = text[:space].rstrip() if space > room // 2 else text[:room]
    return head + mark


def _floor(header: str) -> int:
    return max(MIN_COLUMN, min(len(header), 12))


def _total(widths: Sequence[int]) -> int:
    return sum(widths) + len(GAP) * (len(widths) - 1)


def _shrink(widths: list[int], pool: Sequence[int], floor, width: int) -> None:
    """Narrow the widest column of ``pool`` (never below ``floor(i)``) until the table
    fits ``width`` or no column of ``pool`` can give more."""
    while _total(widths) > width:
        can = [i for i in pool if widths[i] > floor(i)]
        if not can:
            return
        i = max(can, key=lambda j: widths[j])
        others = [widths[j] for j in can if j != i]
        target = max(floor(i), max(others, default=0), widths[i] - (_total(widths) - width))
        widths[i] = min(target, widths[i] - 1)


def _layout(widths: list[int], headers: Sequence[str], flexible: Sequence[int], width: int
            ) -> tuple[list[int], list[int]]:
    """``(columns shown, their widths)`` of a table that fits ``width``: the flexible
    columns give way first, down to a few characters; then they are left out, the first
    listed first; then the others give way too."""
    shown = list(range(len(widths)))
    widths = list(widths)
    _shrink(widths, flexible, lambda i: _floor(headers[i]), width)
    for i in flexible:
        if _total([widths[j] for j in shown]) <= width:
            break
        shown.remove(i)
    kept = [widths[i] for i in shown]
    _shrink(kept, range(len(kept)), lambda i: MIN_COLUMN, width)
    return shown, kept


def fit_table(headers: Sequence[str], rows: Iterable[Sequence[object]], flexible: Sequence[int] = (),
              width: int | None = None) -> str:
    """Left-aligned columns, mqadmin style (``#Header``), fitted to ``width`` (default
    :func:`output_width`). The columns numbered in ``flexible`` hold free text, in the
    order they give way: they are shortened first, and left out when even short they do
    not fit (``--json`` has every field); identifiers are cut last."""
    cells = [[f"#{h}" for h in headers]] + [[" ".join(str(c).split()) for c in row] for row in rows]
    natural = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    shown, widths = _layout(natural, cells[0], flexible, width or output_width())
    return "\n".join(GAP.join(_cut(r[i], w).ljust(w) for i, w in zip(shown, widths)).rstrip() for r in cells)


def wrap_line(line: str, indent: int, width: int | None = None) -> str:
    """``line`` wrapped between words to ``width`` (default :func:`output_width`), the
    continuation lines indented by ``indent`` spaces (under a label column). A word
    longer than a line stays whole."""
    width = width or output_width()
    if len(line) <= width:
        return line
    return textwrap.fill(line, width, subsequent_indent=" " * indent, break_long_words=False,
                         break_on_hyphens=False, drop_whitespace=True)

"""Tables and long lines of ``pymq`` fit the width: 80 columns when piped (or a wider
``COLUMNS``), whole columns, cut or wrapped between words, never inside one. ``stats``
used to wrap mid-word at 80 and 120 columns."""

from __future__ import annotations

import re

import pytest

from pymq import cli
from pymq.cli.layout import fit_table, output_width, wrap_line
from cli_support import make_store
from conftest import small_config


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("layout") / ("a-rather-long-directory-name-" * 3) / "store"
    rs = make_store(str(path), small_config())
    return str(path), rs


def _words(text: str) -> list:
    return re.sub(r"[\d.,]+", "N", text).split()


def _run(capfd, monkeypatch, columns, argv):
    monkeypatch.setenv("COLUMNS", str(columns))
    code = cli.main(argv)
    out, err = capfd.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize("columns", [40, 80, 120])
def test_stats_and_top_fit_and_break_only_between_words(store, capfd, monkeypatch, columns):
    path, _ = store
    for argv in (["stats", "--sample", "0"], ["top", "--iterations", "1", "--interval", "0.01"]):
        wide = _run(capfd, monkeypatch, 1000, ["--store", path, *argv])
        out = _run(capfd, monkeypatch, columns, ["--store", path, *argv])
        width = max(columns, 80)                    # piped: 80 unless COLUMNS is wider
        assert all(len(line) <= width or " " not in line.strip() for line in out.splitlines()), out
        if argv[0] == "stats":                      # the same words (numbers may move between two runs)
            assert _words(out) == _words(wide), (wide, out)


def test_query_table_keeps_ids_whole_and_leaves_out_free_text(store, capfd, monkeypatch):
    path, rs = store
    argv = ["--store", path, "query-msg-by-key", "-t", "TopicTest", "-k", "order-5"]
    narrow = _run(capfd, monkeypatch, 80, argv)
    wide = _run(capfd, monkeypatch, 200, argv)
    assert max(map(len, narrow.splitlines())) <= 80 and rs[5].msg_id in narrow.split()
    assert "#Body" not in narrow and "#Body" in wide and "b'hello 5'" in wide


def test_fit_table_cuts_free_text_at_a_word_with_an_ellipsis():
    rows = [("TopicTest", "a body of many words that does not fit in the room left for it", 7)]
    text = fit_table(["Topic", "Body", "N"], rows, flexible=(1,), width=40)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 40 and lines[1].startswith("TopicTest  a body of")
    cut = re.split(r" {2,}", lines[1])[1]
    assert cut.endswith("…")
    words = cut[:-1].split()                                       # whole words, the body's first ones
    assert words and words == rows[0][1].split()[:len(words)]


def test_wrap_line_hangs_under_the_label():
    line = "disk       " + " ".join(f"word{i}" for i in range(30))
    lines = wrap_line(line, 11, width=50).splitlines()
    assert all(len(x) <= 50 for x in lines) and all(x.startswith(" " * 11) for x in lines[1:])
    assert " ".join(lines).split() == line.split()


def test_piped_width_is_80_unless_columns_is_wider(monkeypatch):
    monkeypatch.setenv("COLUMNS", "50")
    assert output_width() == 80
    monkeypatch.setenv("COLUMNS", "132")
    assert output_width() == 132

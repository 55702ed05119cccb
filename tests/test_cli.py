"""CLI wrappers: one-sentence errors and the vocabulary trainer's file selection."""

import pytest

from t2t.cli import run_cli, text_files
from t2t.errors import T2TError


def test_t2t_error_is_one_line_and_status_2(capsys):
    @run_cli
    def main(argv):
        raise T2TError("no such thing; do the other thing.")
    assert main([]) == 2
    assert capsys.readouterr().err == "error: no such thing; do the other thing.\n"


def test_vocab_folders_are_read_like_the_text_tasks(tmp_path):
    (tmp_path / "a.txt").write_text("words")
    (tmp_path / "wiki.test.raw").write_text("more words")
    (tmp_path / "README.md").write_text("docs")
    (tmp_path / "SOURCE_README.txt").write_text("provenance")
    assert sorted(p.name for p in text_files([str(tmp_path)])) == ["a.txt", "wiki.test.raw"]
    named_twice = text_files([str(tmp_path), str(tmp_path / "wiki.test.raw")])
    assert sorted(p.name for p in named_twice) == ["a.txt", "wiki.test.raw"]
    with pytest.raises(T2TError, match="no such file or folder"):
        text_files([str(tmp_path / "missing")])

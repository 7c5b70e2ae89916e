"""tests.tools.docs: the blocks of docs/ that a command prints are what the command prints now, and a block
that drifted is named by --check and rewritten, with the rest of its page untouched."""

import re

import pytest

from tests.tools import docs
from tests.tools.docs import BLOCKS, Block, current, replace, stale


def test_every_block_of_docs_is_what_its_command_prints():
    # a failure here: run `make docs` (python -m tests.tools.docs) and commit the pages it rewrites
    assert stale() == []


def test_every_block_sits_once_on_its_page_under_its_command():
    for name, block in BLOCKS.items():
        text = (docs.DOCS / block.page).read_text()
        assert text.count(f"<!-- begin: {name} -->") == text.count(f"<!-- end: {name} -->") == 1
        assert f"from `{block.command}`" in current(text, name)


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """docs/ with one page and one block whose command now prints "figure 2"."""
    monkeypatch.setattr(docs, "BLOCKS", {"toy": Block("page.md", "python -m toy", lambda: "figure 2")})
    page = tmp_path / "page.md"
    page.write_text("# Page\n\nbefore\n<!-- begin: toy -->\nfigure 1\n<!-- end: toy -->\nafter\n")
    return page


def test_a_drifted_block_is_named_and_left_alone_by_check(toy, capsys, monkeypatch):
    monkeypatch.setattr(docs, "DOCS", toy.parent)
    before = toy.read_text()
    assert docs.main(["--check"]) == 1
    assert capsys.readouterr().out == "docs/page.md: block toy differs from `python -m toy`\n"
    assert toy.read_text() == before


@pytest.mark.parametrize("argv, code", [(["--help"], 0), (["--chek"], 2), (["docs/results.md"], 2)])
def test_help_or_a_wrong_argument_rewrites_nothing(toy, capsys, monkeypatch, argv, code):
    monkeypatch.setattr(docs, "DOCS", toy.parent)
    before = toy.read_text()
    with pytest.raises(SystemExit) as exit_:
        docs.main(argv)
    assert exit_.value.code == code and toy.read_text() == before
    out, err = capsys.readouterr()
    assert "--check" in (out if code == 0 else err)


def test_a_drifted_block_is_rewritten_and_nothing_else(toy):
    assert stale(toy.parent, write=True) == ["toy"]
    text = toy.read_text()
    assert text.startswith("# Page\n\nbefore\n<!-- begin: toy -->\n<!-- written by `python -m tests.tools.docs`")
    assert text.endswith("\nfigure 2\n<!-- end: toy -->\nafter\n") and "figure 1" not in text
    assert stale(toy.parent) == []


def test_a_missing_or_doubled_block_is_an_error_naming_it():
    with pytest.raises(ValueError, match="block toy exactly once .* found 0"):
        replace("no markers", "toy", "x")
    twice = "<!-- begin: toy -->a<!-- end: toy -->" * 2
    with pytest.raises(ValueError, match="found 2"):
        current(twice, "toy")


def test_the_prose_gpu_hours_are_the_dry_runs():
    text = (docs.DOCS / "reproducing-the-paper.md").read_text()
    per_run, total = re.search(r"([\d.]+) GPU-hours per Qwen2.5-7B run, ([\d,]+) for all 27", text).groups()
    block = current(text, "reproduce-plan")
    assert f"backbone=qwen2.5-7b experiment=seal seed=0 budget=paper launch=paper  <= {per_run} GPU-h" in block
    printed = float(re.search(r"GPU-hours of training to run, upper bound: ([\d.]+)", block).group(1))
    assert int(total.replace(",", "")) == round(printed)
    assert block.startswith("\n<!-- written") and "27 jobs, 0 finished, 27 to run (under multirun/reproduce)" in block


def test_the_paper_numbers_block_holds_every_number_of_the_paper():
    from experiments.tables.paper_numbers import TABLES

    block = current((docs.DOCS / "reproducing-the-paper.md").read_text(), "paper-numbers")
    for rows in TABLES.values():
        for (backbone, arm), cells in rows.items():
            shown = [str(v) if isinstance(v, int) else f"{v:.2f}" for v in cells.values()]
            assert f"| {backbone} | {arm} | " + " | ".join(shown) + " |" in block

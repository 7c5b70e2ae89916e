"""The blocks of docs/ that a command prints, written into the pages by that command's own functions.

    python -m tests.tools.docs            # rewrite every block that differs (make docs)
    python -m tests.tools.docs --check    # rewrite nothing; exit 1 naming each block that differs

A block is the text between `<!-- begin: NAME -->` and `<!-- end: NAME -->` in a page of docs/. BLOCKS
gives, per block, its page, the command a reader runs to see the same figures, and the function that
makes the text (the one that command prints with). tests/tools/test_docs.py fails when a page and
its command disagree, so a figure cannot drift from the code that computes it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def memory_plan() -> str:
    from experiments.measure.memory import plan_tables

    return f"```text\n{plan_tables()}\n```"


def paper_numbers() -> str:
    from experiments.tables.paper_numbers import markdown

    return markdown()


def reproduce_plan() -> str:
    """What the dry run prints on a checkout without runs, its root named as the default relative path, with
    the SLURM settings conf/local/example.yaml shows."""
    from experiments import reproduce
    from experiments.cluster.needs import EXAMPLE_LAUNCHER

    with tempfile.TemporaryDirectory() as tmp:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            reproduce.main(["--dry-run", "--root", f"{tmp}/multirun/reproduce", "--", *EXAMPLE_LAUNCHER])
        text = out.getvalue().replace(f"{Path(tmp).resolve()}/", "").rstrip()
    return f"```text\n{text}\n```"


def paper_jobs() -> str:
    from experiments.cluster.needs import paper_jobs_markdown

    return paper_jobs_markdown()


def _example_launcher() -> str:
    from experiments.cluster.needs import EXAMPLE_LAUNCHER

    return " ".join(EXAMPLE_LAUNCHER)


@dataclass(frozen=True)
class Block:
    page: str
    command: str
    make: Callable[[], str]


BLOCKS = {
    "memory-plan": Block("gpus-and-slurm.md", "python -m experiments.bench memory", memory_plan),
    "paper-numbers": Block("reproducing-the-paper.md", "python -m experiments.tables.paper_numbers", paper_numbers),
    "reproduce-plan": Block("reproducing-the-paper.md", f"python -m experiments.reproduce --dry-run -- {_example_launcher()}",
                            reproduce_plan),
    "paper-jobs": Block("gpus-and-slurm.md", f"python -m experiments.reproduce --dry-run -- {_example_launcher()}",
                        paper_jobs),
}


def block_text(name: str) -> str:
    """What goes between the markers of block `name`: a line naming its command, then the command's text."""
    block = BLOCKS[name]
    note = f"<!-- written by `python -m tests.tools.docs` from `{block.command}`: change the code, not this text -->"
    return f"\n{note}\n{block.make()}\n"


def _span(text: str, name: str) -> re.Match:
    found = list(re.finditer(rf"<!-- begin: {re.escape(name)} -->(.*?)<!-- end: {re.escape(name)} -->", text, re.S))
    if len(found) != 1:
        raise ValueError(f"a page must hold block {name} exactly once between its begin and end markers; "
                         f"found {len(found)}")
    return found[0]


def current(text: str, name: str) -> str:
    """The text between the markers of block `name` in a page's `text`."""
    return _span(text, name).group(1)


def replace(text: str, name: str, inner: str) -> str:
    """`text` with the block `name` holding `inner`; everything outside the markers unchanged."""
    span = _span(text, name)
    return text[: span.start(1)] + inner + text[span.end(1):]


def stale(docs: Path | None = None, write: bool = False) -> list[str]:
    """The blocks whose page (under `docs`, default docs/) differs from what their command prints now;
    rewrites them when `write`."""
    differing = []
    for name, block in BLOCKS.items():
        page = (docs or DOCS) / block.page
        text, inner = page.read_text(), block_text(name)
        if current(text, name) != inner:
            differing.append(name)
            if write:
                page.write_text(replace(text, name, inner))
    return differing


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.docs", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 naming each block that differs")
    check = parser.parse_args(argv).check  # --help and an unknown argument exit here, before any page is read
    differing = stale(write=not check)
    for name in differing:
        verb = "differs from" if check else "rewritten from"
        print(f"docs/{BLOCKS[name].page}: block {name} {verb} `{BLOCKS[name].command}`")
    return 1 if check and differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

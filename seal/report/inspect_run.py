"""notebooks/inspect_run.ipynb on one training run, from the command line:

    python -m seal.report.inspect_run outputs/train/<run>    # no folder: the latest run under outputs/train/

runs the notebook as `jupyter execute` does (nbclient) and saves it, with its plots and tables, as
`<run>/inspect_run.ipynb` (open it in Jupyter or VS Code). A folder that holds no training run ends in one
sentence and exit code 2. In Jupyter, the notebook reads the folder from SEAL_RUN_DIR (else the latest run)
through `find_run` and shows the same sentence."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from seal.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "inspect_run.ipynb"
# what `python run.py` (task=train) writes into a run folder once its first round is done
RUN_FILES = ("run_config.json", "metrics.jsonl")


def find_run(folder: str | os.PathLike | None, root: Path = ROOT) -> Path:
    """The training run folder `folder` names (None: the latest under <root>/outputs/train/); UserError when
    it is not one."""
    if folder is None:
        runs = sorted((root / "outputs" / "train").glob("**/metrics.jsonl"), key=lambda p: p.stat().st_mtime)
        if not runs:
            raise UserError(f"no training run under {root / 'outputs' / 'train'}: run `make run` first, or name "
                            "a run folder (SEAL_RUN_DIR=... in Jupyter)")
        return runs[-1].parent
    path = Path(folder)
    if not path.is_dir():
        raise UserError(f"{folder} is not a folder; name a training run's folder, e.g. outputs/train/<run>")
    missing = [name for name in RUN_FILES if not (path / name).is_file()]
    if missing:
        raise UserError(f"{folder} is not a training run's folder (it has no {missing[0]}); name one that "
                        "`python run.py` wrote, e.g. outputs/train/<run>")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", nargs="?", default=None, help="a training run's folder (default: the latest)")
    args = parser.parse_args(argv)
    try:
        run = find_run(args.run, Path.cwd())
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    os.environ["SEAL_RUN_DIR"] = str(run.resolve())
    NotebookClient(notebook, timeout=600, resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    out = run / NOTEBOOK.name
    nbformat.write(notebook, out)
    print(out)


if __name__ == "__main__":
    main()

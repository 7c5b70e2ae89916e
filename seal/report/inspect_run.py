"""notebooks/inspect_run.ipynb on one training run, from the command line:

    python -m seal.report.inspect_run outputs/train/<run>    # no folder: the newest run under outputs/train/

runs the notebook as `jupyter execute` does (nbclient) and saves it, with its plots and tables, as
`<run>/inspect_run.ipynb` (open it in Jupyter or VS Code). A folder that holds no training run, or a run
file that is damaged, ends in one sentence and exit code 2. In Jupyter, or under `jupyter execute`, the
notebook reads the folder from SEAL_RUN_DIR (else the newest run) through `find_run`, says on the terminal
which run it picked (`announce`) and saves its figure as `<run>/inspect_run.png`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from seal.errors import FULL, UserError, cannot_write, unwritable
from seal.io import DamagedFile, read_json, read_jsonl

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "inspect_run.ipynb"
# what `python run.py` (task=train) writes into a run folder once its first round is done
RUN_FILES = ("run_config.json", "metrics.jsonl")
# set while this module runs the notebook: it prints where the notebook went itself
QUIET = "SEAL_INSPECT_QUIET"
FIGURE = "inspect_run.png"


def find_run(folder: str | os.PathLike | None, root: Path = ROOT) -> Path:
    """The training run folder `folder` names (None: the newest under <root>/outputs/train/; a relative path from the
    working directory, else from `root`: Jupyter runs the notebook in notebooks/, and a path such as
    outputs/train/<run> is the repository's); UserError when it is not one."""
    if folder is None:
        runs = sorted((root / "outputs" / "train").glob("**/metrics.jsonl"), key=lambda p: p.stat().st_mtime)
        if not runs:
            raise UserError(f"no training run under {root / 'outputs' / 'train'}: run `make run` first, or name "
                            "a run folder (SEAL_RUN_DIR=... in Jupyter)")
        return runs[-1].parent
    path = Path(folder)
    if not path.is_dir() and not path.is_absolute() and (root / path).is_dir():
        path = root / path
    if not path.is_dir():
        here = Path.cwd()
        where = ("" if path.is_absolute() else f" in {here}" if here.resolve() == root.resolve()
                 else f" in {here} or in {root}")
        raise UserError(f"{folder} is not a folder{where}; name a training run's folder, e.g. outputs/train/<run>")
    missing = [name for name in RUN_FILES if not (path / name).is_file()]
    if missing:
        raise UserError(f"{folder} is not a training run's folder (it has no {missing[0]}); name one that "
                        "`python run.py` wrote, e.g. outputs/train/<run>")
    return path


def read_run(run: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The run's rounds (metrics.jsonl) and configuration (run_config.json); a damaged file is named in one
    sentence (UserError)."""
    try:
        return read_jsonl(run / "metrics.jsonl"), read_json(run / "run_config.json")
    except DamagedFile as exc:
        raise UserError(f"{exc}; the notebook reads it whole: move it away or restore it") from None


def read_file(path: Path) -> Any:
    """A JSON file of the run, or UserError naming it when it is damaged."""
    try:
        return read_json(path)
    except DamagedFile as exc:
        raise UserError(f"{exc}; the notebook reads it whole: move it away or restore it") from None


def announce(run: Path, chosen: bool, saved: Path | None = None) -> None:
    """Tell the terminal that started the notebook (a kernel's own stderr: `jupyter execute` shows nothing
    else) which run it reads and where its figure went; silent under this module's main, which says so itself."""
    if os.environ.get(QUIET):
        return
    how = "named by SEAL_RUN_DIR" if chosen else "the newest under outputs/train/; SEAL_RUN_DIR=<run> picks another"
    line = f"inspect_run: {run} ({how})" if saved is None else f"inspect_run: figure saved as {saved}"
    print(line, file=sys.__stderr__, flush=True)


# what a run folder that cannot take the notebook's files leaves a user
READ_ONLY_ADVICE = ("copy the run to a folder you can write and name the copy, or open notebooks/inspect_run.ipynb in "
                    "Jupyter with SEAL_RUN_DIR=<run> (it shows the run, and says that its figure was not saved)")


def save_figure(fig: Any, run: Path, chosen: bool) -> None:
    """The notebook's figure as <run>/inspect_run.png (`jupyter execute` keeps no output); a run folder that cannot
    take it (read-only, full) is said in one line on the terminal and the notebook goes on."""
    try:
        fig.savefig(run / FIGURE, dpi=80)
    except OSError as exc:
        if not unwritable(exc):
            raise
        if exc.errno in FULL:
            (run / FIGURE).unlink(missing_ok=True)  # what the full disk left of it
        print(f"inspect_run: figure not saved: {cannot_write(exc, 'the notebook shows it', run / FIGURE)}",
              file=sys.__stderr__, flush=True)
        return
    announce(run, chosen, saved=run / FIGURE)


def check_writable(path: Path) -> None:
    """UserError naming `path` when it cannot be written (nothing is left behind either way)."""
    existed = path.exists()
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
    except OSError as exc:
        if not unwritable(exc):
            raise
        raise UserError(cannot_write(exc, READ_ONLY_ADVICE)) from None
    if not existed:
        path.unlink()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", nargs="?", default=None, help="a training run's folder (default: the newest)")
    args = parser.parse_args(argv)
    try:
        run = find_run(args.run, Path.cwd())
        read_run(run)
        check_writable(run / NOTEBOOK.name)  # before the notebook runs: it is saved there
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    os.environ["SEAL_RUN_DIR"] = str(run.resolve())
    os.environ[QUIET] = "1"
    if args.run is None:
        print(f"inspect_run: {run} (the newest under outputs/train/)", file=sys.stderr)
    try:
        execute(notebook)
    except CellExecutionError as exc:
        if exc.ename not in ("UserError", "DamagedFile"):
            raise
        print(f"error: {exc.evalue}", file=sys.stderr)
        sys.exit(2)
    out = run / NOTEBOOK.name
    try:
        nbformat.write(notebook, out)
    except OSError as exc:
        if not unwritable(exc):
            raise
        if exc.errno in FULL:
            out.unlink(missing_ok=True)  # what the full disk left of it
        print(f"error: {cannot_write(exc, READ_ONLY_ADVICE, out)}", file=sys.stderr)
        sys.exit(2)
    print(out)


def execute(notebook: Any) -> None:
    """Run the notebook in a kernel of its own, over IPC (sockets in a temporary folder, named by absolute path:
    the kernel runs in notebooks/): a kernel on TCP warns on every start that its traffic is unencrypted,
    though it never leaves this machine."""
    import tempfile

    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    with tempfile.TemporaryDirectory(prefix="seal-kernel-") as sockets:
        km = KernelManager(transport="ipc", ip=str(Path(sockets) / "kernel"))
        try:
            NotebookClient(notebook, km=km, timeout=600, resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
        finally:
            if km.has_kernel:
                km.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()

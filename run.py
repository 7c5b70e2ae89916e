"""The one entry point: `python run.py task=<train|eval|sanity|replay|score|validate_diagnoser|show_prompt> ...`."""

import os
from pathlib import Path

import hydra
from omegaconf import DictConfig

import seal.tasks

# processes started for this run (the SLURM jobs of a sweep, which inherit this environment, and
# accelerate's workers) import seal from this checkout, whatever their working directory
_ROOT = str(Path(__file__).resolve().parent)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    seal.tasks.quiet_console()
    seal.tasks.run(cfg)


if __name__ == "__main__":
    # a command line Hydra cannot compose ends in one sentence, as every other user error does
    seal.tasks.command_line.main(main)

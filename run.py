"""The one entry point: `python run.py task=<train|eval|replay|score|validate_diagnoser|show_prompt> ...`."""

import hydra
from omegaconf import DictConfig

import seal.tasks


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    seal.tasks.run(cfg)


if __name__ == "__main__":
    main()

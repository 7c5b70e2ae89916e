"""The jobs behind the paper's Tables 1 and 3: every backbone x arm x seed (plan), each one's overrides,
budget and run directory as Hydra names it, its composed configuration, whether it has finished, and the
manifest that lists them all for experiments.aggregate."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from experiments.tables.columns import ABLATIONS, MANIFEST, PAPER_BUDGET
from seal.errors import UserError
from seal.io import DamagedFile, folder_name, read_json_object

REPO = Path(__file__).resolve().parents[2]
# the paper's three backbones (section 4.1)
TABLE1_BACKBONES = ("qwen2.5-3b", "qwen2.5-7b", "toolace-2-8b")
TABLE1_ARMS = ("vanilla_rl", "seal")
TABLE3_BACKBONE = "qwen2.5-7b"


@dataclass(frozen=True)
class Job:
    backbone: str
    experiment: str
    seed: int

    def overrides(self, extra: tuple[str, ...] = ()) -> list[str]:
        return [f"backbone={self.backbone}", f"experiment={self.experiment}", f"seed={self.seed}", *extra]


def plan(backbones=TABLE1_BACKBONES, seeds=(0, 1, 2), ablation_backbone: str | None = TABLE3_BACKBONE) -> list[Job]:
    """Table 1's jobs, then Table 3's that Table 1 does not already have."""
    jobs = [Job(b, arm, s) for b in backbones for arm in TABLE1_ARMS for s in seeds]
    if ablation_backbone:
        jobs += [Job(ablation_backbone, arm, s) for arm in (*ABLATIONS, "seal") for s in seeds]
    return list(dict.fromkeys(jobs))


def _chosen(extra: tuple[str, ...], group: str) -> list[str]:
    """The values `extra` gives the config group `group` (budget=..., launch=...), each checked to exist."""
    chosen = [o.split("=", 1)[1] for o in extra if o.split("=", 1)[0].lstrip("+~") == group]
    for name in chosen:
        if not (REPO / "conf" / group / f"{name}.yaml").exists():
            known = ", ".join(sorted(p.stem for p in (REPO / "conf" / group).glob("*.yaml")))
            raise UserError(f"{group}={name}: there is no conf/{group}/{name}.yaml; choose one of {known}")
    return chosen


def with_budget(extra: tuple[str, ...]) -> tuple[str, ...]:
    """The overrides every job gets: budget=paper first unless `extra` chooses a budget itself, and with the
    paper's budget the authors' launch as seal runs it (conf/launch/paper.yaml: the release's 4 GPUs and vLLM at 0.4,
    sharded with fsdp2 where the release uses FSDP) unless `extra` chooses a launch."""
    budgets, launches = _chosen(extra, "budget"), _chosen(extra, "launch")
    budget = budgets[-1] if budgets else PAPER_BUDGET
    ours = ([] if budgets else [f"budget={PAPER_BUDGET}"]) + (
        [f"launch={PAPER_BUDGET}"] if budget == PAPER_BUDGET and not launches else [])
    return (*ours, *extra)


def parse_plan(backbones: str, seeds: str, ablation_backbone: str) -> list[Job]:
    """The jobs of the command line's --backbones, --seeds and --ablation-backbone."""
    names = [b for b in backbones.split(",") if b] + ([ablation_backbone] if ablation_backbone else [])
    for name in names:
        if not (REPO / "conf" / "backbone" / f"{name}.yaml").exists():
            raise UserError(f"backbone {name}: there is no conf/backbone/{name}.yaml; the paper's are "
                            f"{', '.join(TABLE1_BACKBONES)}")
    try:
        seed_list = tuple(int(s) for s in seeds.split(","))
    except ValueError:
        raise UserError(f"--seeds {seeds}: give whole numbers separated by commas, e.g. 0,1,2") from None
    return plan(tuple(b for b in backbones.split(",") if b), seed_list, ablation_backbone or None)


def run_dir(root: Path, job: Job, extra: tuple[str, ...] = ()) -> Path:
    """Where Hydra puts the job: its overrides as typed, sorted, joined by commas, less the keys
    conf/config.yaml leaves out of a folder's name (task, how the job is launched, the checkpoint cadence,
    the W&B settings) and hydra's own (seal.io.folder_name, as conf/config.yaml's `seal.folder`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    excluded = set(_excluded_keys())
    parsed = OverridesParser.create().parse_overrides(_task_overrides(job, extra))
    return root / folder_name(",".join(sorted(o.input_line for o in parsed if o.key_or_group not in excluded)))


@cache
def _excluded_keys() -> tuple[str, ...]:
    from omegaconf import OmegaConf

    config = OmegaConf.load(REPO / "conf" / "config.yaml")
    return tuple(config.hydra.job.config.override_dirname.exclude_keys)


# overrides of Hydra's own settings (the launcher's, a sweep's folder): shared by every job, not part of a run's name
HYDRA_OVERRIDES = ("hydra.", "+hydra.", "hydra/")


def _task_overrides(job: Job, extra: tuple[str, ...]) -> list[str]:
    return [o for o in job.overrides(extra) if not o.startswith((*HYDRA_OVERRIDES, "task="))]


def finished(path: Path) -> bool:
    """The run wrote its metrics.json (its last file, after every evaluation), whole."""
    return (path / "metrics.json").is_file() and damaged(path) is None


def damaged(path: Path) -> str | None:
    """The sentence naming the run's metrics.json when it is damaged (cut short, not an object): the run is not
    finished, and its job resumes it to write the file again (seal.tasks.run_folder.finished_already); None otherwise."""
    if not (path / "metrics.json").is_file():
        return None
    try:
        read_json_object(path / "metrics.json")
    except DamagedFile as exc:
        return str(exc)
    return None


def write_manifest(root: Path, jobs: list[Job], extra: tuple[str, ...]) -> Path:
    """<root>/manifest.json: every planned run directory (relative to root) with its arm, backbone and seed,
    for experiments.aggregate to name the ones that never came back."""
    runs = [{"dir": run_dir(root, job, extra).name, "backbone": job.backbone, "experiment": job.experiment,
             "seed": job.seed} for job in jobs]
    root.mkdir(parents=True, exist_ok=True)
    path = root / MANIFEST
    path.write_text(json.dumps({"overrides": list(extra), "runs": runs}, indent=2))
    return path


def job_config(job: Job, extra: tuple[str, ...], launcher: str = "basic") -> Any:
    """The job's composed config, with Hydra's own when `launcher` is a SLURM one (its hydra.launcher: the
    settings of conf/local/default.yaml and the command line)."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException, OverrideParseException

    from seal.tasks.command_line import added_key_refusal, sentence

    # what run.py would refuse as each job starts (a key added with + that no config declares): before any plan
    refused = added_key_refusal(list(extra), REPO / "conf")
    if refused:
        raise UserError(refused)
    slurm = launcher != "basic"
    hydra = [f"hydra/launcher={launcher}", *(o for o in extra if o.startswith(
        ("hydra.launcher.", "hydra/launcher=", "+hydra.launcher.")))] if slurm else []
    try:
        with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
            return compose(config_name="config", overrides=[*_task_overrides(job, extra), *hydra],
                           return_hydra_config=slurm)
    except (ConfigCompositionException, OverrideParseException) as exc:
        raise UserError(sentence(exc)) from None


def shown_overrides(job: Job, extra: tuple[str, ...]) -> list[str]:
    """A job's overrides as the plan shows them (the hydra.* settings every job shares are shown once)."""
    return [o for o in job.overrides(extra) if not o.startswith(HYDRA_OVERRIDES)]

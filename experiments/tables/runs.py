"""Which runs there are below a root and what became of each.

survey() finds the expected runs (the manifest's, else every run directory found), reads each finished one
(read_run: identity, budget, the evaluations of each model) and names every other with why it is not used:
missing, failed, unfinished, damaged, a duplicate, not evaluated on test, without trajectories.
expected_seeds() says which seeds each row expects, so that a row over fewer runs says so."""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from pathlib import Path

from experiments.tables.columns import HEADLINE, MODELS, PROTOCOLS
from experiments.tables.paper_numbers import BASE
from seal.errors import UserError
from seal.io import JSON_KINDS, DamagedFile, read_json_object, read_jsonl

# the project's split choices (split=<name>), which a run's configuration records by their _target_
CONF_SPLIT = Path(__file__).resolve().parents[2] / "conf" / "split"

# -- which runs there are, and what became of each ------------------------------------------------------

def read_manifest(path: Path) -> list[dict]:
    """The expected runs experiments.reproduce wrote: [{"dir", "backbone", "experiment", "seed"}]."""
    try:
        runs = json.loads(path.read_text())["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        runs = None
    if not isinstance(runs, list) or not all(isinstance(run, dict) and "dir" in run for run in runs):
        raise UserError(f"{path} is not a manifest experiments.reproduce wrote (JSON with a list \"runs\" of run "
                        "directories): give that file with --manifest, or move it away")
    return runs


def run_state(run_dir: Path) -> str:
    """finished, or what stopped the run: never created, failed (error.txt's last line), unfinished, not started."""
    if not run_dir.is_dir():
        return "missing: the run directory was never created"
    if (run_dir / "metrics.json").exists() and (run_dir / "run_config.json").exists():
        return "finished"
    error = run_dir / "error.txt"
    if error.exists():
        lines = [line for line in error.read_text().splitlines() if line.strip()]
        return "failed: " + (lines[-1].strip() if lines else "see error.txt")
    if (run_dir / "run_config.json").exists():
        done = (run_dir / "metrics.jsonl").read_text().count("\n") if (run_dir / "metrics.jsonl").exists() else 0
        return f"unfinished: {done} round(s) done"
    return "not started"


def _run_config(run_dir: Path) -> dict | None:
    """The run's configuration: run_config.json, else the one Hydra wrote when the job started."""
    for path, load in ((run_dir / "run_config.json", json.loads), (run_dir / ".hydra" / "config.yaml", _yaml)):
        try:
            found = load(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(found, dict):
            return found
    return None


def _yaml(text: str):
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from None


def identity(run_dir: Path) -> dict:
    """{"backbone", "experiment", "seed"} of a run directory from its configuration; {} when it has none."""
    config = _run_config(run_dir) or {}
    try:
        return {"backbone": config["backbone"]["name"], "experiment": arm(config), "seed": config["seed"]}
    except (KeyError, TypeError):
        return {}


def arm(config: dict) -> str:
    """The run's arm, which follows from what it selects (seal.tasks.arm): recorded by the run, or worked out
    from its resolved config (runs made before the arm was recorded, or a config Hydra wrote for a run that
    failed early). Never the run's label alone: `experiment_name` is a user's label, and a preset's name kept
    under an override would pool an ablation with the method. Only a config that names no arm group falls
    back to the label."""
    if config.get("arm"):
        return config["arm"]
    from seal.tasks.arm import ARM_GROUPS, arm_of

    if all(isinstance(config.get(group), dict) for group in (*ARM_GROUPS, "budget")):
        return arm_of(config)[0]
    return config["experiment_name"]


# what a run's overrides may set without changing its numbers beyond what its row shows: the row's backbone, arm
# (its groups and the values changed inside them: seal.tasks.arm), seed and budget's name, and what only names, logs
# or places the run (a launch spreads the same work over processes); keys inside these groups (`logger.mode=...`)
_SHOWN_CHOICES = ("seed", "backbone", "budget", "experiment", "experiment_name", "task")
_NEUTRAL_GROUPS = ("logger", "hydra", "launch")


def budget_label(config: dict) -> str:
    """The run's budget and settings: the budget's name, with every override it was started with that changes its
    numbers and that its row does not show (budget.* sizes, trainer.* hyperparameters, backbone.* keys, a split):
    runs of one backbone and arm under other settings are named apart, as under other budgets."""
    from seal.tasks.arm import ARM_GROUPS

    name = (config.get("budget") or {}).get("name", "unknown")

    def changes_numbers(override: str) -> bool:
        key = override.lstrip("+~").split("=", 1)[0]
        group = key.replace("/", ".").split(".", 1)[0]
        if group in (*_NEUTRAL_GROUPS, *ARM_GROUPS):
            return False
        return key != group or group not in _SHOWN_CHOICES

    changed = [o for o in config.get("overrides") or [] if changes_numbers(o)]
    return name + (f" with {' '.join(changed)}" if changed else "")


def _no_test_evaluation(config: dict, metrics: dict) -> str:
    """Why a finished run has no evaluation of its final model on test, from what its config says."""
    budget = config.get("budget") or {}
    if config.get("heldout_part", "test") == "val":
        if budget.get("val_every") is None:
            return ("finished, not evaluated on test: its before/after evaluation is on the validation part "
                    "and budget.val_every was null, so no model was scored on test")
        return (f"finished, not evaluated on test: budget.val_every={budget['val_every']} but metrics.json has "
                "no test_final")
    if not metrics.get("eval_after") and budget.get("heldout_entries_per_category") == 0:
        return "finished, not evaluated on test: budget.heldout_entries_per_category was 0 (no before/after evaluation)"
    return "finished, not evaluated on test: metrics.json has no eval_after"


def _test_selected(metrics: dict) -> dict | None:
    """The test-selected diagnostic, its score under the key of the protocol that produced it. Runs made
    before seal.rl.selection stored it so put the score under the official key whatever the protocol; the
    selection scores with the official key when the evaluation has it, so a run whose final test
    evaluation has only the release protocol's was scored under the release protocol."""
    found = metrics.get("test_selected_diagnostic")
    official, release = f"{PROTOCOLS['official'][0]}/avg", f"{PROTOCOLS['release'][0]}/avg"
    final = metrics.get("test_final") or {}
    if found and official in found and release not in found and official not in final and release in final:
        found = {k: v for k, v in found.items() if k != official} | {release: found[official]}
    return found or None


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _evaluation_fault(key: str, evaluation: object) -> str | None:
    """What is wrong with one evaluation of metrics.json under `key` (None: nothing): an object whose scores
    (eval/...) and num_entries are numbers, and whose selected round (a best model's) is an object."""
    if not isinstance(evaluation, dict):
        return f"its {key} holds {JSON_KINDS[type(evaluation)]} where a run writes an evaluation (an object)"
    for name, value in evaluation.items():
        if (name.startswith("eval/") or name == "num_entries") and not _number(value):
            return f"its {key}'s {name} holds {JSON_KINDS[type(value)]} where a run writes a number"
    if "selected" in evaluation and not isinstance(evaluation["selected"], dict):
        return f"its {key}'s selected holds {JSON_KINDS[type(evaluation['selected'])]} where a run writes an object"
    return None


def read_objects(run_dir: Path) -> tuple[dict, dict]:
    """run_config.json and metrics.json, each checked to hold what a run writes (an object; in metrics.json every
    evaluation an object or null, _evaluation_fault, the out-of-domain ones an object of them by benchmark; in
    run_config.json a backbone's name and a seed): DamagedFile naming the file and what it holds otherwise, as for a
    file cut short."""
    config, metrics = (read_json_object(run_dir / name) for name in ("run_config.json", "metrics.json"))
    for key, value in metrics.items():
        if not key.startswith(("eval_", "test_", "ood_")) or value is None:
            continue
        if key.startswith("ood_") and isinstance(value, dict):
            fault = next(filter(None, (_evaluation_fault(f"{key}.{name}", found) for name, found in value.items())), None)
        else:
            fault = _evaluation_fault(key, value)
        if fault:
            raise DamagedFile(f"{run_dir / 'metrics.json'} is damaged: {fault}")
    if not isinstance(config.get("backbone"), dict) or "name" not in config["backbone"] or "seed" not in config:
        raise DamagedFile(f"{run_dir / 'run_config.json'} is damaged: it has no backbone name or no seed")
    return config, metrics


def read_run(run_dir: Path, name: str) -> dict:
    """A finished run: its identity and budget, and per model (MODELS) the evaluation on test and its folder."""
    config, metrics = read_objects(run_dir)
    part = config.get("heldout_part", "test")
    evals, folders = {}, {}
    for model, (_label, key, folder, without_val) in MODELS.items():
        found = _test_selected(metrics) if model == "test_selected" else metrics.get(key)
        if found:
            evals[model] = found
            if folder:
                folders[model] = folder
        elif without_val and part == "test" and metrics.get(without_val[0]):
            # no validation part: the before/after evaluation is the test evaluation
            evals[model], folders[model] = metrics[without_val[0]], without_val[1]
    headline = "best_on_val" if "best_on_val" in evals else "final"
    if headline in evals:
        evals[HEADLINE] = evals[headline]
        if headline in folders:
            folders[HEADLINE] = folders[headline]
    return {"dir": str(run_dir), "name": name, "backbone": config["backbone"]["name"],
            "experiment": arm(config), "seed": config["seed"], "part": part, "split": split_name(config),
            "budget": budget_label(config), "headline": headline,
            "selected_round": (metrics.get("test_best_on_val") or {}).get("selected", {}).get("round"),
            "no_test": None if "final" in evals else _no_test_evaluation(config, metrics),
            "entries": {m: e.get("num_entries") for m, e in evals.items() if m != HEADLINE}, "evals": evals,
            "folders": folders,
            "ood_before": metrics.get("ood_before") or {}, "ood_after": metrics.get("ood_after") or {}}


def split_name(config: dict) -> str | None:
    """The name of the BFCL V3 split a run was evaluated on, as `split=` chooses it: the conf/split/ group whose
    _target_ its configuration records (e.g. "all" for seal.env.splits.all_entries), else that function's name;
    None where the configuration records none."""
    split = config.get("split")
    target = split.get("_target_") if isinstance(split, dict) else None
    if not (isinstance(target, str) and target):
        return None
    return split_groups().get(target, target.rpartition(".")[2])


@functools.cache
def split_groups() -> dict[str, str]:
    """conf/split/'s choices by the function each builds its split with: {"seal.env.splits.all_entries": "all", ...}."""
    return {_yaml(path.read_text())["_target_"]: path.stem for path in sorted(CONF_SPLIT.glob("*.yaml"))}


def _who(found: dict) -> str:
    return f"{found['backbone']} {found['experiment']} seed {found['seed']}" if found else "no configuration"


def survey(root: Path, manifest: list[dict] | None = None) -> tuple[list[dict], list[dict]]:
    """The runs the tables use, and every run that is not used or not complete, with why: {"dir",
    "state", "kind"} (kind: unlisted, absent, damaged, duplicate, no test, no trajectories) and the run's backbone,
    experiment and seed where they are known. Expected: the manifest's runs, else every job directory
    found below `root` (Hydra's .hydra/ or a run_config.json)."""
    found = sorted({str(p.parent.relative_to(root)) for name in (".hydra", "run_config.json") for p in root.rglob(name)})
    problems: list[dict] = []
    if manifest is None:
        expected = {name: {"dir": name} for name in found}
    else:
        expected = {entry["dir"]: entry for entry in manifest}
        for name in found:
            if name not in expected:
                problems.append({"dir": name, "kind": "unlisted", "state": f"not in the manifest ({_who(identity(root / name))}): "
                                                                          "used in no table"})
    runs = []
    for name, entry in sorted(expected.items()):
        state = run_state(root / name)
        if state != "finished":
            problems.append({**identity(root / name), **entry, "kind": "absent", "state": state})
            continue
        try:
            runs.append(read_run(root / name, name))
        except DamagedFile as exc:
            # a file cut short or torn: the run is named, every table is built from the others
            problems.append({**identity(root / name), **entry, "kind": "damaged", "state": f"damaged: {exc}"})
    runs = _without_duplicates(runs, problems)
    for run in runs:
        if run["no_test"]:
            problems.append({**_key(run), "kind": "no test", "state": run["no_test"]})
    # the differences pair the headline model's trajectories: a run evaluated without them is named
    damaged = set()
    for run in runs:
        folder = run["folders"].get(HEADLINE)
        for prefix, file, _ in PROTOCOLS.values():
            path = Path(run["dir"]) / folder / file if folder else None
            if not folder or f"{prefix}/avg" not in run["evals"][HEADLINE]:
                continue
            if not path.exists():
                problems.append({**_key(run), "kind": "no trajectories", "state": f"no trajectories: {folder}/{file}"})
                continue
            try:
                read_jsonl(path)
            except DamagedFile as exc:
                problems.append({**_key(run), "kind": "damaged", "state": f"damaged: {exc}"})
                damaged.add(run["name"])
    return [r for r in runs if r["name"] not in damaged], problems


def _key(run: dict) -> dict:
    return {"dir": run["name"], "backbone": run["backbone"], "experiment": run["experiment"], "seed": run["seed"]}


def _without_duplicates(runs: list[dict], problems: list[dict]) -> list[dict]:
    """The runs whose backbone, arm and seed no other finished run has; each of the others is named."""
    same = defaultdict(list)
    for run in runs:
        same[(run["backbone"], run["experiment"], run["seed"])].append(run["name"])
    for (backbone, arm, seed), names in same.items():
        for name in names if len(names) > 1 else ():
            others = ", ".join(n for n in names if n != name)
            problems.append({"dir": name, "backbone": backbone, "experiment": arm, "seed": seed, "kind": "duplicate",
                             "state": f"duplicate: {backbone} {arm} seed {seed} is also {others}; neither is used "
                                      "(remove one, or aggregate with a manifest that lists one)"})
    return [r for r in runs if len(same[(r["backbone"], r["experiment"], r["seed"])]) == 1]


def expected_seeds(runs: list[dict], problems: list[dict]) -> dict[tuple[str, str], set]:
    """(backbone, arm) -> the seeds expected: those of the runs used and of every run named with its
    identity (not one the manifest does not list); the base-model row expects every seed of its backbone."""
    seeds: dict[tuple[str, str], set] = defaultdict(set)
    for item in [*runs, *(p for p in problems if p["kind"] != "unlisted" and "backbone" in p)]:
        seeds[(item["backbone"], item["experiment"])].add(item["seed"])
        seeds[(item["backbone"], BASE)].add(item["seed"])
    return seeds


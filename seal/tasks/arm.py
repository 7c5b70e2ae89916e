"""A training run's arm: what it selects, named after the preset it equals or the nearest preset and what differs.

An arm is defined by the choices of the groups that change the method (the interface, the diagnoser, the
reweighting, the prompt rendering and the protocol the environment answers under), any value changed
inside one of those groups (`reweighting.w_max=3`), and the two budget settings the paper arms set
(`budget.step_limit`, `budget.max_train_tokens`). The backbone, the seed, the sizes of the budget and the
trainer's hyperparameters are not part of it: tables compare arms per backbone over seeds.

    arm_of(cfg) -> ("wo_reweighting", {...})                      # experiment=seal reweighting=off
    arm_of(cfg) -> ("seal_evolving+reweighting=off", {...})       # python run.py reweighting=off

The name depends only on the choices, never on how the command line spelt them, so two runs with equal
choices share a name and two runs with different choices never do. run_config.json and metrics.json
record both (`arm`, `arm_choices`); the aggregate groups runs by `arm_choices`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from seal.io import CONF_DIR

# each group that defines an arm, and the key of its config that names the chosen file
ARM_GROUPS = {"env_interface": "name", "diagnoser": "name", "reweighting": "mode", "rendering": "name",
              "protocol": "name"}
# budget settings that define an arm (the paper arms set them; the other budget keys are sizes)
ARM_SETTINGS = ("step_limit", "max_train_tokens")


def arm_choices(cfg: Mapping[str, Any], conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """What a composed config selects for its arm: each arm group's choice, the values changed inside those
    groups against the chosen file (as `group.key`), and `budget.<setting>` for ARM_SETTINGS."""
    choices: dict[str, Any] = {}
    changed: dict[str, Any] = {}
    for group, key in ARM_GROUPS.items():
        node = _plain(cfg[group])
        choices[group] = node[key]
        reference = _group_file(conf_dir, group, str(node[key]))
        if reference is not None:
            changed |= _differences(group, _flatten(node), _flatten(reference))
    for setting in ARM_SETTINGS:
        choices[f"budget.{setting}"] = _plain(cfg["budget"]).get(setting)
    return choices | dict(sorted(changed.items()))


def arm_name(choices: Mapping[str, Any], presets: Mapping[str, Mapping[str, Any]]) -> str:
    """The preset whose choices equal `choices`, else the nearest preset (fewest differing keys; ties by
    name) followed by `+key=value` for every key that differs, in key order."""
    def differing(preset: Mapping[str, Any]) -> list[str]:
        return sorted(k for k in set(choices) | set(preset) if k not in preset or choices.get(k) != preset[k])

    nearest = min(sorted(presets), key=lambda name: len(differing(presets[name])))
    keys = differing(presets[nearest])
    return "+".join([nearest] + [f"{k}={_shown(choices.get(k))}" for k in keys])


def arm_of(cfg: Mapping[str, Any], conf_dir: Path = CONF_DIR) -> tuple[str, dict[str, Any]]:
    """(the arm's name, its choices) of a composed config."""
    choices = arm_choices(cfg, conf_dir)
    return arm_name(choices, preset_choices(conf_dir)), choices


def preset_choices(conf_dir: Path = CONF_DIR) -> dict[str, dict[str, Any]]:
    """Each preset of conf/experiment/ and the choices it makes on top of conf/config.yaml's defaults."""
    return _presets(str(conf_dir))


@functools.cache
def _presets(conf_dir: str) -> dict[str, dict[str, Any]]:
    root = Path(conf_dir)
    base = {group: choice for item in OmegaConf.load(root / "config.yaml").defaults if isinstance(item, DictConfig)
            for group, choice in item.items()}
    presets = {}
    for path in sorted((root / "experiment").glob("*.yaml")):
        preset = OmegaConf.to_container(OmegaConf.load(path))
        chosen = dict(base)
        for item in preset.pop("defaults", []):
            for key, choice in item.items():
                chosen[key.removeprefix("override").strip().lstrip("/")] = choice
        # the config the preset composes to, as far as the arm reads it
        config = {group: OmegaConf.merge(_group_file(root, group, chosen[group]) or {}, preset.get(group) or {})
                  for group in [*ARM_GROUPS, "budget"]}
        presets[path.stem] = arm_choices(config, root)
    return presets


def _group_file(conf_dir: Path, group: str, choice: str) -> dict[str, Any] | None:
    """conf/<group>/<choice>.yaml with the files of its own defaults list merged in, as Hydra composes it
    (None: no such file)."""
    path = conf_dir / group / f"{choice}.yaml"
    if not path.is_file():
        return None
    node = OmegaConf.load(path)
    defaults = list(node.pop("defaults", None) or ["_self_"])
    merged = OmegaConf.create()
    for item in defaults:
        merged = OmegaConf.merge(merged, node if item == "_self_" else _group_file(conf_dir, group, str(item)) or {})
    return OmegaConf.to_container(merged)


def _plain(node: Any) -> dict[str, Any]:
    """A config node as a plain dict, interpolations left as written (`${seed}`)."""
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=False)
    return dict(node)


def _flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in node.items():
        if isinstance(value, Mapping) and value:
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _differences(group: str, run: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """`group.key`: value for every value of the run's group that its chosen file does not set to the same;
    keys the file sets by interpolation (`${seed}`, `${rendering.schema_style}`) follow other settings and
    are not the group's own choice."""
    def interpolated(value: Any) -> bool:
        return isinstance(value, str) and value.startswith("${")

    return {f"{group}.{key}": value for key, value in run.items()
            if not interpolated(reference.get(key)) and (key not in reference or reference[key] != value)}


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))

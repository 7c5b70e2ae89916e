"""run.py's edge: a command line Hydra cannot compose (a misspelt key, an unknown choice, an unreadable
override) ends in one sentence and exit code 2, like every other error a user can cause.

Hydra prints such errors itself (several lines, its config search path, a suggestion to prepend `+`
that is wrong for keys that exist under another spelling) and exits with 1, unless HYDRA_FULL_ERROR is
set, when it raises them instead. `main` sets it while Hydra composes, turns what it raises into one
sentence, and `composed` takes it away again once the task starts, so that a failing task is reported
by Hydra as before. A user who sets HYDRA_FULL_ERROR gets Hydra's own report. A sweep's folder that
Hydra made before it found the error (`SweepFolder`, a Hydra callback) is removed again. A run folder Hydra
cannot make or write (a read-only or full disk) ends in one sentence naming it, too. A key added with `+` that no
config file declares (Hydra would add it, and nothing would read it) is refused before Hydra starts.

The folders themselves (conf/config.yaml): the `seal.folder` resolver names a run's folder after its
overrides (seal.io.folder_name), and `SweepFolder` fixes a sweep's folder, named after the whole sweep's
overrides, for every job of the sweep before the first one starts."""

from __future__ import annotations

import difflib
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from seal.errors import cannot_write, unwritable
from seal.io import folder_name

# conf/config.yaml's run and sweep folders: `${seal.folder:${hydra:job.override_dirname}}`
OmegaConf.register_new_resolver("seal.folder", folder_name, replace=True)

FULL_ERROR = "HYDRA_FULL_ERROR"
# whether main() set HYDRA_FULL_ERROR (and composed() should take it away)
_set_here = False
# the sweep folder this multirun is about to make (None: none, or one that was there before)
_new_sweep_folder: Path | None = None


class SweepFolder(Callback):
    """conf/config.yaml's hydra.callbacks. Before a multirun starts: fixes its sweep folder for every job, and
    notes whether it is new (to remove it again when Hydra cannot compose a job).

    `hydra.sweep.dir` reads the sweep's overrides (`hydra.job.override_dirname`), which only the multirun's
    own config holds: every job's config is composed again from the hydra overrides plus the job's, where
    the same interpolation would read the job's. So the folder, resolved here once, joins the hydra
    overrides as a plain value, unless the command line named one."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        global _new_sweep_folder
        from hydra.core.hydra_config import HydraConfig

        named = any(o.split("=", 1)[0].lstrip("+~") == "hydra.sweep.dir" for o in config.hydra.overrides.hydra)
        # the `hydra:` resolver reads the config Hydra holds, which it sets only once the launcher starts
        holder = HydraConfig.instance()
        before = holder.cfg
        holder.set_config(config)  # which makes config.hydra read-only, as it was not
        try:
            folder = str(config.hydra.sweep.dir)
            typed = str(config.hydra.job.override_dirname)
        finally:
            holder.cfg = before
            OmegaConf.set_readonly(config.hydra, False)
        # a sweep made before its values were sorted in its folder's name is found where it was made
        earlier = Path(folder).with_name(folder_name(typed, sort=False))
        if not named and not Path(folder).exists() and earlier.is_dir():
            folder = str(earlier)
        if not named:
            config.hydra.sweep.dir = folder
            config.hydra.overrides.hydra.append(f"hydra.sweep.dir={quoted(folder)}")
        path = Path(folder).resolve()
        _new_sweep_folder = None if path.exists() else path


def quoted(value: str) -> str:
    """`value` as a quoted string of Hydra's override grammar (commas and equal signs stay part of it)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def remove_folder(folder: Path) -> None:
    """Remove a refused run's folder, and the folders above it it leaves empty, up to the working directory
    (outputs/<task>/ and outputs/ when the run made them)."""
    shutil.rmtree(folder, ignore_errors=True)
    cwd = Path.cwd().resolve()
    for parent in folder.resolve().parents:
        if parent == cwd or cwd not in parent.parents or any(parent.iterdir()):
            break
        parent.rmdir()


def main(hydra_main: Callable[[], Any]) -> None:
    """Call run.py's @hydra.main function; a composition error ends the process in one sentence, exit code 2."""
    global _set_here
    from hydra.errors import ConfigCompositionException, OverrideParseException

    refused = added_key_refusal(sys.argv[1:], CONF)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        sys.exit(2)
    if os.environ.get(FULL_ERROR):
        hydra_main()
        return
    os.environ[FULL_ERROR] = "1"
    _set_here = True
    try:
        hydra_main()
    except (ConfigCompositionException, OverrideParseException) as exc:
        print(f"error: {sentence(exc)}", file=sys.stderr)
        if _new_sweep_folder is not None:
            remove_folder(_new_sweep_folder)
        sys.exit(2)
    except (OSError, ValueError) as exc:
        # Hydra makes the run folder, writes .hydra/ into it and opens its run.log before any task starts (logging
        # reports a log file it cannot open as a ValueError raised from the OSError)
        cause = exc if isinstance(exc, OSError) else exc.__cause__
        if not unwritable(cause):
            raise
        print(f"error: {cannot_write(cause, RUN_FOLDER_ADVICE)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        # before the task started (a task's own Ctrl-C is reported by seal.tasks.run)
        print("interrupted before the run started; nothing was kept", file=sys.stderr)
        sys.exit(130)
    finally:
        composed()


# run.py's config folder
CONF = Path(__file__).resolve().parents[2] / "conf"


def added_key_refusal(argv: list[str], conf: Path) -> str | None:
    """The sentence for a `+key=value` (or `++key=value`) of the command line that adds a key no config file
    under `conf` has, which no code of seal would read (a typo Hydra's `+` lets through silently, or a
    class's keyword error deep in the run); None when every added key is one a config file has, lies under
    a key left open there (`null` or `{}`: env_interface.thresholds, backbone.lora), or is Hydra's own."""
    if {"--config-dir", "-cd", "--config-path", "-cp"} & {a.partition("=")[0] for a in argv}:
        return None  # config files of the user's, elsewhere, may declare the keys: Hydra alone judges
    keys, open_keys = declared_keys(conf)
    for arg in argv:
        typed, equals, _ = arg.partition("=")
        if not typed.startswith("+") or not equals:
            continue  # a flag, a plain override, an unreadable one (Hydra's to report)
        key = typed.removeprefix("+").removeprefix("+")
        if "@" in key or key.split(".")[0] == "hydra" or (conf / key).is_dir():
            continue  # a package override, Hydra's own settings, a config group added
        if key in keys or any(key.startswith(f"{o}.") for o in open_keys):
            continue
        group = key.partition(".")[0]
        listed = f"`python run.py --cfg job --package {group}` lists the keys" if (conf / group).is_dir() else None
        return f"{typed} adds {key}, which no config of seal has and nothing reads ({key_hint(key, keys, listed)})"
    return None


def declared_keys(conf: Path) -> tuple[set[str], set[str]]:
    """Every dotted key some config file under `conf` sets (a group's file under its group, a `_global_` one
    at the top, a file another includes `@_here_` under the includer's group), and those of them left open
    (`null` or `{}`: any key below them may be added)."""
    import yaml

    files = {path: yaml.safe_load(path.read_text()) or {} for path in sorted(conf.rglob("*.yaml"))}
    prefixes: dict[Path, set[str]] = {path: set() for path in files}
    included: set[Path] = set()
    for path, tree in files.items():
        # a file's package: its folder under conf/ (conf/launch/parts/x.yaml: launch.parts)
        group = "/".join(path.parent.relative_to(conf).parts)
        prefix = "" if path.read_text().startswith("# @package _global_") or not group else f"{group.replace('/', '.')}."
        # an include is found from conf/ when it starts with /, else from the includer's group
        here = [conf / f"{item[1:]}.yaml" if item.startswith("/") else conf / group / f"{item}.yaml"
                for item in (i.removesuffix("@_here_") for i in tree.get("defaults", [])
                             if isinstance(i, str) and i.endswith("@_here_"))]
        for file in [path, *here]:
            prefixes[file].add(prefix)
        included.update(here)
    for path in included:  # a file only included (conf/base/) is no group of its own
        prefixes[path].discard(".".join(path.parent.relative_to(conf).parts) + ".")
    keys: set[str] = set()
    open_keys: set[str] = set()

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            keys.add(dotted)
            if value is None or value == {}:
                open_keys.add(dotted)
            elif isinstance(value, dict):
                walk(value, f"{dotted}.")

    for path, tree in files.items():
        for prefix in prefixes[path]:
            # a file's defaults list and Hydra's own settings are no keys of the config
            walk({k: v for k, v in tree.items() if k not in ("defaults", "hydra")}, prefix)
    return keys, open_keys


# the way out of a run folder that cannot take the run's files (seal.errors.cannot_write)
RUN_FOLDER_ADVICE = ("run from a folder you can write, or give the run another folder with hydra.run.dir=<folder> "
                     "(a sweep: hydra.sweep.dir=<folder>)")


def composed() -> None:
    """The config is composed (seal.tasks.run calls this first): Hydra reports a failing task its own way again."""
    global _set_here
    if _set_here:
        os.environ.pop(FULL_ERROR, None)
        _set_here = False


# what to write instead, for a typed key a user is likely to give the wrong kind of value
TYPED_KEY_FIXES = {
    "hydra.launcher.gpus_per_node": "it takes a number; ask for a GPU type with hydra.launcher.gres=gpu:<type>:<n> (or "
                                    "+hydra.launcher.additional_parameters.gpus_per_node=<type>:<n>)",
}


def sentence(exc: Exception) -> str:
    """One sentence for an error Hydra raised while composing the config."""
    from hydra.errors import MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options:
        group, _, choice = exc.missing_cfg_file.rpartition("/")
        return f"{group}={choice} is not a choice of {group}; choose one of {', '.join(exc.options)}"
    if isinstance(exc, OverrideParseException):
        first = str(exc).splitlines()[0]
        return (f"an override could not be read ({first}); write group=choice, key=value, or +new.key=value "
                "for a key the config does not have")
    cause = exc.__cause__
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and getattr(cause, "full_key", None):
        return missing_key(str(cause.full_key), _keys_of(cause))
    if isinstance(cause, ValidationError) and getattr(cause, "full_key", None):
        # a value the key's declared type refuses (a launcher's settings are typed): the key, why, and the way out
        fix = TYPED_KEY_FIXES.get(str(cause.full_key))
        return f"{cause.full_key}: {str(cause).splitlines()[0]}" + (f"; {fix}" if fix else "")
    lines = [line.strip() for line in str(exc).split("Config search path")[0].splitlines() if line.strip()]
    return " ".join(lines)


def missing_key(key: str, keys: list[str]) -> str:
    """The sentence for an override of `key`, which the config (whose dotted keys are `keys`) does not have."""
    return f"{key} is not a key of the config ({key_hint(key, keys)})"


def key_hint(key: str, keys: Any, listed: str | None = None) -> str:
    """Where a user finds the key meant instead of `key`: the closest of `keys`, else `listed` (where the keys are
    listed), else the whole config's listing."""
    close = difflib.get_close_matches(key, sorted(keys), cutoff=0.75)
    return f"the closest one is {close[0]}" if close else listed or "`python run.py --cfg job` lists them"


def _keys_of(error: Any) -> list[str]:
    """Every dotted key of the config an OmegaConf error was raised in (Hydra's own keys only for a hydra. key)."""
    from omegaconf import OmegaConf

    node = getattr(error, "parent_node", None)
    try:
        root = node._get_root() if node is not None else None
        tree = OmegaConf.to_container(root, resolve=False) if root is not None else {}
    except Exception:  # what the suggestion reads is a courtesy: never a second error
        return []
    keys = list(_flatten(tree))
    if not str(getattr(error, "full_key", "")).startswith("hydra."):
        keys = [k for k in keys if not k.startswith("hydra.")]
    return keys


def _flatten(tree: Any, prefix: str = ""):
    for key, value in tree.items():
        yield f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _flatten(value, f"{prefix}{key}.")

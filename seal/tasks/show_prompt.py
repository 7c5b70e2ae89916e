"""task=show_prompt: exactly what the model sees at an entry's first turn, without loading a model.

    python run.py task=show_prompt entry=multi_turn_base_50 view=train experiment=seal

Prints the prompt (stdout) and writes it to `prompt.txt`; a one-line description goes to stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from seal.env.benchmark import get_entries
from seal.errors import UserError
from seal.interface import PLAIN, apply, initial_interface


def show_prompt(cfg: DictConfig, out_dir: Path) -> None:
    from seal.policy.formats import get_format
    from seal.policy.prompt import VIEWS, first_prompt

    if not cfg.entry:
        raise UserError("task=show_prompt needs an entry: add entry=<id>, e.g. entry=multi_turn_base_50")
    if cfg.view not in VIEWS:
        raise UserError(f"view={cfg.view!r}: choose train (the training interface at round 0) or eval (the plain benchmark)")
    try:
        (entry,) = get_entries([str(cfg.entry)])
    except KeyError as exc:
        raise UserError(f"entry={cfg.entry}: {exc.args[0]}") from None
    fmt = get_format(cfg.backbone.tool_format, tools=cfg.rendering.tools)
    view: Any = PLAIN
    described = "plain benchmark interface"
    if cfg.view == "train":
        interface_cfg = instantiate(cfg.env_interface)
        omega = initial_interface(interface_cfg)
        view = apply(omega, fmt.call_example, interface_cfg)
        on = [switch for switch, value in omega.switches().items() if value]
        described = f"training interface {interface_cfg.name} at round 0 (on: {', '.join(on) or 'nothing'})"
    text = first_prompt(fmt, entry, view)
    (out_dir / "prompt.txt").write_text(text)
    # stdout carries the prompt alone; what it is goes to stderr
    print(f"# {entry.id}, view={cfg.view}: {described}; tools rendered {fmt.tools}, "
          f"format {fmt.name} in {fmt.chat.name}", file=sys.stderr)
    sys.stdout.write(text)
    sys.stdout.flush()

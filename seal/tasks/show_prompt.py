"""task=show_prompt: exactly what the model sees at an entry's first turn, without loading a model.

    python run.py task=show_prompt entry=multi_turn_base_50 view=train experiment=seal
    python run.py task=show_prompt entry=multi_turn_miss_func_0 show=error protocol=release

Prints the prompt (stdout) and writes it to `prompt.txt`; a one-line description goes to stderr.
`show=error` prints instead what the model reads after two example outputs in the entry's first turn,
under the run's `protocol` (bfcl | release): a malformed call block, then a call to a tool the turn has
not shown (a held-out miss_func tool when the entry has one), each as the format writes it and the
chat template wraps the environment's answer.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from seal.env.benchmarks.bfcl_v3 import get_entries
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
    if cfg.get("show", "prompt") not in ("prompt", "error"):
        raise UserError(f"show={cfg.show!r}: choose prompt (the first turn's prompt) or error (the answers to bad calls)")
    if cfg.get("show", "prompt") == "error":
        text = error_answers(fmt, entry, view, cfg.protocol)
        described += f"; protocol {cfg.protocol.name}"
    else:
        text = first_prompt(fmt, entry, view)
    (out_dir / "prompt.txt").write_text(text)
    # stdout carries the prompt alone; what it is goes to stderr
    print(f"# {entry.id}, view={cfg.view}: {described}; tools rendered {fmt.tools}, "
          f"format {fmt.name} in {fmt.chat.name}", file=sys.stderr)
    sys.stdout.write(text)
    sys.stdout.flush()


def error_answers(fmt: Any, entry: Any, view: Any, protocol_cfg: Any) -> str:
    """Two example outputs of the first turn and the environment's answer to each, under the protocol."""
    from seal.env.calls import ToolCall
    from seal.env.episode import Episode
    from seal.env.protocol import Protocol
    from seal.policy.rollout import environment_answer

    protocol = Protocol.from_config(protocol_cfg)
    # the format's own example with its last closing bracket removed: it cannot decode in any format
    cut = fmt.call_example.rfind("}") if "}" in fmt.call_example else fmt.call_example.rfind(")")
    malformed = fmt.call_example[:cut] + fmt.call_example[cut + 1:]
    visible = entry.visible_function_names(0)
    held_out = [d["name"] for docs in entry.holdout.values() for d in docs]
    name = held_out[0] if held_out else "undefined_tool"
    unavailable = fmt.render_calls([ToolCall(name, (), {})], {})
    parts = []
    for label, output in (("a malformed call block", malformed), (f"a call to {name}, not shown yet", unavailable)):
        episode = Episode(entry, protocol=protocol)
        episode.next_turn()
        parsed = fmt.parse_for(output, protocol.strict_parse)
        feedback = view.parse_error_feedback(parsed.failures, visible) if parsed.failures else None
        outcome = episode.step(parsed.calls, output, parsed.failures, keep_turn=feedback is not None and not parsed.calls)
        answer = environment_answer(fmt, protocol, view, outcome, feedback, visible)
        if outcome.turn_over:
            answer = "(no call ran: the turn ends and the next turn's message follows)\n"
        executed = ", ".join(r.text for r in outcome.records) or "none"
        parts.append(f"=== the model writes {label} ({protocol.name} protocol; calls run: {executed})\n"
                     f"{fmt.chat.assistant_header()}{output}{fmt.chat.end_of_turn}{fmt.after_assistant()}{answer}")
    return "\n".join(parts)

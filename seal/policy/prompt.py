"""task=show_prompt: the text a model sees at an entry's first turn, without loading any model.

    python run.py task=show_prompt entry=multi_turn_base_50 view=train experiment=seal
    python run.py task=show_prompt entry=multi_turn_base_50 view=eval rendering=project

Prints, and writes to `prompt.txt` in the run directory, the chat-wrapped system prompt (tool block,
interface note and guidelines), the first user turn and the assistant header: the exact text the
rollout engine tokenises. `view=train` is the training interface at round 0 (Omega_0 of the chosen
env_interface: components in "evolve" mode are still off then; override e.g.
`env_interface.schema=always` to see them on); `view=eval` is the plain benchmark interface every
evaluation uses. The chat wrapper is the tool format's own (ChatML for qwen_xml and bfcl_python,
Llama-3 headers for llama3_json), which is what every configured backbone's tokenizer selects.

The rollout engine renders its prompts and turn openings with the same two functions (`opening`,
`turn_text`), so what this task prints is what a model is given.
"""

from __future__ import annotations

from seal.env.entry import Entry
from seal.env.episode import TurnStart
from seal.interface.view import View
from seal.policy.formats import ToolFormat

VIEWS = ("train", "eval")


def turn_text(fmt: ToolFormat, view: View, turn: TurnStart) -> str:
    """What opens a turn: the user's messages, or the tool docs a miss_func turn delivers."""
    if turn.new_functions:
        return fmt.holdout_opening(view.delivered_docs(turn.new_functions))
    return fmt.turn_opening(turn.messages)


def opening(fmt: ToolFormat, entry: Entry, view: View, turn: TurnStart) -> tuple[str, str]:
    """The system message and the first turn's text. As bfcl-eval does, an entry's own system message
    follows the tool instructions (and the interface's text) in the one system message."""
    extra = view.system_extra()
    if turn.messages and turn.messages[0]["role"] == "system":
        extra = turn.messages[0]["content"] + (f"\n\n{extra}" if extra else "")
        turn = TurnStart(turn.index, turn.messages[1:], turn.new_functions)
    system = fmt.chat.begin + fmt.chat.message("system", fmt.system_prompt(view.tool_docs(entry.functions), extra))
    return system, turn_text(fmt, view, turn)


def first_prompt(fmt: ToolFormat, entry: Entry, view: View) -> str:
    """System message, the first turn's opening and the assistant header, as the engine renders them."""
    return "".join(opening(fmt, entry, view, TurnStart.of(entry, 0)))

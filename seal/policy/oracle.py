"""The scripted oracle: not a model. It plays each turn's gold calls through the full rollout engine.

In every turn it writes the turn's gold calls in the chosen tool format as one assistant message,
then a plain-text reply that ends the turn (just the reply when the gold is empty). Its text is
tokenised with the embedded SmolLM2 tokenizer and goes through the same rendering, parsing,
execution, masking and verification path as a model's, so a 100% score proves the harness.
"""

from __future__ import annotations

from typing import Any

from seal.env.benchmarks import ORACLE_REPLY, benchmark_of
from seal.env.calls import parse_call
from seal.policy.backbones import Policy, embedded_tokenizer


def oracle_message(episode: Any, entry: Any, fmt: Any) -> str:
    """The scripted step: the benchmark's own script where it has one (seal.env.benchmarks), else the
    turn's gold calls first, then a plain-text reply that ends the turn."""
    scripted = benchmark_of(entry).oracle_message(episode, entry, fmt)
    if scripted is not None:
        return scripted
    gold = entry.gold[episode.turn]
    if gold and not episode.steps[-1]:
        return fmt.render_calls([parse_call(c) for c in gold], entry.docs_by_name())
    return ORACLE_REPLY


class OracleBackbone:
    trainable = False
    oracle = True
    # the script is played by the rollout engine itself; no generation backend is built
    generation = "transformers"

    def __init__(
        self,
        name: str = "oracle",
        tool_format: str = "qwen_xml",
        context_length: int = 1_000_000,
        params_b: float = 0.0,
        lora: Any = None,
        **extra: Any,
    ):
        self.name, self.tool_format, self.context_length = name, tool_format, int(context_length)
        self.params_b, self.lora, self.extra = float(params_b), lora, extra
        self.dtype = None

    def check_weights(self) -> None:
        """A script has no weights to find."""

    def load(self) -> Policy:
        import torch

        return Policy(model=None, tokenizer=embedded_tokenizer(), device=torch.device("cpu"))

    def describe(self) -> str:
        return (
            f"scripted oracle (not a model): replays each turn's gold calls in the {self.tool_format} format, "
            "tokenised with the SmolLM2 tokenizer; a harness self-check and upper bound"
        )

    def peft_config(self):
        return None

"""tau2's user simulator as a language model loaded in-process (benchmark.user.backbone), and the choice between it
and an OpenAI-compatible endpoint (benchmark.user.url): conf/benchmark/tau2.yaml instantiates `user_simulator`
as a partial, which the benchmark calls the first time it needs its user (seal.env.tau2_user holds the rest)."""

from __future__ import annotations

import json
from typing import Any

from seal.env.calls import ToolCall
from seal.env.tau2_user import NO_SIMULATOR, GoldUser, OpenAIUser, SimulatorError, call_of, user_view
from seal.errors import UserError
from seal.io import CONF_DIR
from seal.policy.formats import chat_for, get_format, keyword_arguments

# scripted users benchmark.user.script names (not models: harness checks)
SCRIPTS = {"gold": GoldUser}


def user_simulator(url: str | None = None, model: str | None = None, api_key_env: str | None = None,
                   timeout_s: float = 120.0, backbone: str | None = None, max_new_tokens: int = 512,
                   script: str | None = None) -> Any:
    """The simulator benchmark.user names; UserError naming the ways when it names none, or several."""
    chosen = {k: v for k, v in (("url", url), ("backbone", backbone), ("script", script)) if v}
    if len(chosen) > 1:
        named = " and ".join(f"{k}={v}" for k, v in chosen.items())
        raise UserError(f"benchmark.user: {named} are set; choose one (an OpenAI-compatible endpoint, a backbone "
                        "loaded in-process, or a script) and set the others to null")
    if script:
        if script not in SCRIPTS:
            raise UserError(f"benchmark.user.script={script}: no such scripted user; choose {', '.join(SCRIPTS)}")
        return SCRIPTS[script]()
    if url:
        return OpenAIUser(url, model or "default", api_key_env, float(timeout_s))
    if backbone:
        return LocalUser(str(backbone), int(max_new_tokens))
    raise UserError(NO_SIMULATOR)


class LocalUser:
    """A user simulator loaded in-process: a backbone of conf/backbone/ (benchmark.user.backbone), loaded once by
    `check()` (before the agent's model), shown the conversation in its own chat and tool format (the user's
    tools as the format shows tools, its earlier calls as the format writes calls), answering greedily. Its
    calls are read by the format's parser (never evaluated); a call that does not decode is an unusable answer."""

    def __init__(self, backbone: str, max_new_tokens: int = 512):
        from omegaconf import OmegaConf

        path = CONF_DIR / "backbone" / f"{backbone}.yaml"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
            raise UserError(f"benchmark.user.backbone={backbone}: no such backbone; choose among {known}")
        if int(max_new_tokens) < 1:
            raise UserError(f"benchmark.user.max_new_tokens={max_new_tokens}: the simulator needs at least one token to answer")
        self.name, self.config, self.max_new_tokens = backbone, OmegaConf.load(path), int(max_new_tokens)
        self.policy: Any = None

    def check(self) -> None:
        """Load the model (once); UserError when the backbone is not a model."""
        if self.policy is not None:
            return
        from hydra.utils import instantiate

        self.backbone = instantiate(self.config)
        policy = self.backbone.load()
        if policy.model is None:
            raise UserError(f"benchmark.user.backbone={self.name} is a script, not a language model: name a model")
        # the release rendering: the tools without the project's agent persona, which is no user's
        self.format = get_format(self.backbone.tool_format, chat=chat_for(policy.tokenizer), tools="release")
        ends = self.format.chat.message_ends + self.format.chat.end_of_text
        vocab = policy.tokenizer.get_vocab()
        self.stop_ids = [vocab[t] for t in ends if t in vocab]
        self.policy = policy

    def prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        """The conversation from the user's side (`user_view`) as this backbone reads it, up to its answer."""
        fmt, chat = self.format, self.format.chat
        docs = [tool["function"] for tool in tools]
        by_name = {doc["name"]: doc for doc in docs}
        system = messages[0]["content"]
        text = chat.begin + chat.message("system", fmt.system_prompt(docs, system) if docs else system)
        results: list[str] = []
        for message in messages[1:]:
            if message["role"] == "tool":  # consecutive results travel together, as the format sends them
                results.append(message["content"])
                continue
            if results:
                text, results = text + chat.tool_results(results), []
            if message.get("tool_calls"):
                calls = [ToolCall(name, (), arguments) for name, arguments in map(call_of, message["tool_calls"])]
                text += chat.message("assistant", fmt.render_calls(calls, by_name))
            else:
                text += chat.message(message["role"], message["content"])
        if results:
            text += chat.tool_results(results)
        return text + chat.assistant_header()

    def respond(self, session: Any) -> dict[str, Any]:
        self.check()
        messages, tools = user_view(session)
        return self.reply(self.generate(self.prompt(messages, tools)), tools)

    def generate(self, text: str) -> str:
        """The model's greedy continuation of `text` (its answer, up to the end of its message)."""
        import torch

        model, tokenizer = self.policy.model, self.policy.tokenizer
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"].to(self.policy.device)
        if ids.shape[1] + self.max_new_tokens > self.backbone.context_length:
            raise SimulatorError(f"the conversation ({ids.shape[1]} tokens) and the user simulator's answer "
                                 f"({self.max_new_tokens}) outgrow {self.name}'s context of {self.backbone.context_length}")
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=self.max_new_tokens,
                                 do_sample=False, eos_token_id=self.stop_ids or None,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def reply(self, text: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The answer in OpenAI's assistant-message layout: the calls the format decodes (positional arguments
        named from the user tool's parameters; an unknown tool is refused by user_turn), else the text."""
        by_name = {tool["function"]["name"]: tool["function"] for tool in tools}
        parsed = self.format.parse(text)
        if parsed.failures and not parsed.calls:
            raise SimulatorError(f"the user simulator wrote a tool call that does not decode ({parsed.failures[0][1]})")
        if not parsed.calls:
            return {"content": text.strip()}
        return {"content": "", "tool_calls": [
            {"id": f"user_call_{i}", "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(
                 keyword_arguments(call, by_name) if call.name in by_name else call.kwargs)}}
            for i, call in enumerate(parsed.calls)]}

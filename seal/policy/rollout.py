"""The rollout engine: plays BFCL multi-turn episodes with a policy, batched, one token sequence each.

This module is the episode protocol, shared by every generation backend: every episode is a single
sequence of token ids built by appending the rendered prompt, then the model's generated tokens and
the environment's tokens (tool results, next user turn, template markers) in the order they happen.
Text pieces are tokenised once when they are appended and model tokens are kept as sampled; nothing
is ever decoded and re-tokenised, so the ids, the mask and the sampling logprobs are exactly what
GRPO needs. Episodes are played concurrently (a finished episode's slot is refilled from the queue);
at each step the backend continues every active sequence by one assistant message
(seal.policy.generation: transformers with KV caches, or vLLM). The scripted oracle's messages come
from seal.policy.oracle instead of a model.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from seal.budget import Budget
from seal.env.entry import Entry
from seal.env.episode import MAXIMUM_STEP_LIMIT, Episode, TurnStart
from seal.env.protocol import BFCL, Protocol
from seal.env.verifier import Verdict
from seal.errors import UserError
from seal.interface.view import PLAIN, View
from seal.policy.formats import ToolFormat, chat_for, get_format
from seal.policy.generation import Generated, GenerationRequest, derive_seed, stop_sequences
from seal.policy.prompt import opening, turn_text
from seal.policy.oracle import ORACLE_REPLY, oracle_message  # noqa: F401  (ORACLE_REPLY: re-exported)


@dataclass
class Segment:
    """One appended piece of an episode's sequence: the text it renders and whether the model wrote it."""

    text: str
    ids: list[int]
    model: bool


@dataclass
class EpisodeRollout:
    entry: Entry
    episode: Episode
    verdict: Verdict
    # initial prompt: system (+tools) + first user turn + assistant header
    prompt_ids: list[int]
    # everything after, model and environment tokens interleaved, never re-tokenised
    completion_ids: list[int]
    # 1 = model-generated token, 0 = environment/user/template token
    completion_mask: list[int]
    # sampled token's logprob under the sampling distribution for model tokens, 0.0 for others
    logprobs: list[float]
    num_model_tokens: int
    # "completed" | "force_terminated" | "context_overflow"
    ended: str
    # seconds attributable to this episode: "generation", "execution", "verification"
    timings: dict[str, float]
    # the appended pieces in order (prompt first): for inspection and the token-accounting tests
    transcript: list[Segment] = field(default_factory=list)

    @property
    def reward(self) -> float:
        return 1.0 if self.verdict.valid else 0.0


class _Run:
    """The mutable state of one episode while it is being played."""

    def __init__(self, key: int, entry: Entry, view: View, max_steps: int, seed: int, step_limit: str,
                 protocol: Protocol = BFCL):
        self.key, self.entry, self.view, self.seed = key, entry, view, seed
        self.episode = Episode(entry, max_steps, step_limit, protocol)
        self.prompt_ids: list[int] = []  # pragma: no mutate (set by _start before anything reads it)
        self.system_len = 0  # pragma: no mutate
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        self.segments: list[Segment] = []
        # tokens the protocol's clip took out of the environment's messages (the release's context check counts them)
        self.clipped_tokens = 0
        self.timings = {"generation": 0.0, "execution": 0.0, "verification": 0.0}
        # the progress display's count of this episode's turns: known at its start, and finished so far
        self.turns_planned = max(1, len(self.episode.turns))  # pragma: no mutate (display only)
        self.turns_counted = 0  # pragma: no mutate (display only)

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + len(self.ids)

    @property
    def raw_length(self) -> int:
        """The length with every environment message unclipped."""
        return self.length + self.clipped_tokens

    def append(self, text: str, ids: list[int], model: bool, logprobs: list[float] | None = None) -> None:
        self.ids += ids
        self.mask += [int(model)] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.segments.append(Segment(text, ids, model))

    def drop_overflow(self, context_length: int, always: bool = False) -> None:
        """Drop the environment's last piece when it ran past the context window (or `always`, as the release
        drops an episode's last environment message, cmt_linear.py:163-165): no model token follows it, and
        the learner's sequences (and its memory plan) stay within the window."""
        if (always or self.length > context_length) and len(self.segments) > 1 and not self.segments[-1].model:
            n = len(self.segments.pop().ids)
            del self.ids[-n:], self.mask[-n:], self.logprobs[-n:]


class RolloutEngine:
    def __init__(
        self,
        policy: Any,
        fmt: ToolFormat,
        *,
        context_length: int,
        max_new_tokens: int,
        batch_size: int,
        max_steps_per_turn: int = MAXIMUM_STEP_LIMIT,
        # whether max_steps_per_turn caps each turn (BFCL) or the whole episode (the release's training)
        step_limit: str = "turn",
        # how the environment answers (seal.env.protocol: BFCL's harness, or the authors' release)
        protocol: Protocol = BFCL,
        oracle: bool = False,
        kv_cache: bool = True,
        generator: Any = None,
        compute_dtype: Any = None,
        memory_bytes: int | None = None,
        memory_fraction: float = 0.5,
    ):
        self.policy, self.format = policy, fmt
        self.tokenizer = policy.tokenizer
        self.context_length, self.max_new_tokens = int(context_length), int(max_new_tokens)
        self.batch_size, self.max_steps_per_turn = max(1, int(batch_size)), int(max_steps_per_turn)
        self.step_limit = step_limit
        self.protocol = protocol
        self.oracle = oracle
        if generator is None and not oracle:
            if policy.model is None:
                raise UserError("the rollout engine needs a model unless it plays the scripted oracle (oracle=True)")
            from seal.policy.generation_hf import TransformersGenerator

            generator = TransformersGenerator(
                policy.model, pad_id=self.tokenizer.pad_token_id or 0, compute_dtype=compute_dtype,
                memory_bytes=memory_bytes, memory_fraction=memory_fraction, kv_cache=kv_cache,
            )
        self.generator = generator
        self._pieces: dict[str, list[int]] = {}
        self._system_ids: dict[str, list[int]] = {}
        self.eot_ids = self._encode(fmt.chat.end_of_turn)
        generation_config = getattr(policy.model, "generation_config", None)
        self.stops, self.closing = stop_sequences(
            self.tokenizer, fmt.chat, getattr(generation_config, "eos_token_id", None)
        )

    @property
    def model(self) -> Any:
        """The model the backend generates with (None for the oracle)."""
        return getattr(self.generator, "model", None)

    @model.setter
    def model(self, model: Any) -> None:
        # the RL loop swaps in the trainer's (possibly peft-wrapped) model
        self.generator.model = model

    @classmethod
    def for_backbone(cls, backbone: Any, policy: Any, budget: Budget, tool_rendering: str = "project",
                     protocol: Protocol = BFCL) -> "RolloutEngine":
        """The engine for a configured backbone and checked budget (max_new_tokens, batch_size,
        max_steps_per_turn, step limit, rollout memory), showing tools in `tool_rendering`
        (cfg.rendering.tools: project | release) and answering under `protocol` (cfg.protocol)."""
        memory_gb = budget.rollout_memory_gb
        fmt = get_format(backbone.tool_format, chat=chat_for(policy.tokenizer), tools=tool_rendering)
        generator = None
        if backbone.generation == "vllm":
            from seal.policy.generation_vllm import VLLMGenerator, VLLMMemory

            options = backbone.vllm
            generator = VLLMGenerator(
                backbone.model_path(), dtype=backbone.dtype, context_length=backbone.context_length, seed=0,
                memory=VLLMMemory(kv_cache_gib=memory_gb, gpu_memory_utilization=options.get("gpu_memory_utilization")),
                enforce_eager=options.get("enforce_eager"),
            )
        return cls(
            policy, fmt, context_length=backbone.context_length, max_new_tokens=budget.max_new_tokens,
            batch_size=budget.batch_size, max_steps_per_turn=budget.max_steps_per_turn, step_limit=budget.step_limit,
            protocol=protocol, oracle=backbone.oracle, compute_dtype=policy.compute_dtype,
            memory_bytes=None if memory_gb is None else int(memory_gb * 2**30),
            memory_fraction=budget.rollout_memory_fraction, generator=generator,
        )

    # ------------------------------------------------------------------------------------ rendering

    def _encode(self, text: str) -> list[int]:
        if len(text) <= 256:  # pragma: no mutate (template pieces recur: tokenise each once)
            ids = self._pieces.get(text)  # pragma: no mutate (a miss tokenises again: same ids)
            if ids is None:
                ids = self._pieces[text] = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            return list(ids)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(
            ids, skip_special_tokens=False,
            clean_up_tokenization_spaces=False,  # pragma: no mutate (transformers 5's tokenizers backend cleans up nothing)
        )

    def _prompt(self, entry: Entry, view: View, turn: TurnStart) -> tuple[str, list[int], int]:
        """The prompt's text and ids, and how many of them are the system message (shared by every
        entry with the same tools, so a backend can cache it once per play)."""
        system, first = opening(self.format, entry, view, turn)
        system_ids = self._system_ids.get(system)  # pragma: no mutate (a miss tokenises again)
        if system_ids is None:
            system_ids = self._system_ids[system] = self.tokenizer(system, add_special_tokens=False)["input_ids"]
            if len(self._system_ids) > 64:  # pragma: no mutate (the cache's size is a memory choice)
                self._system_ids.pop(next(iter(self._system_ids)))  # pragma: no mutate
        return system + first, list(system_ids) + self._encode(first), len(system_ids)

    def prompt_tokens(self, entry: Entry, view: View = PLAIN) -> int:
        """Token length of the rendered initial prompt."""
        return len(self._prompt(entry, view, TurnStart.of(entry, 0))[1])

    # ------------------------------------------------------------------------------------ playing

    def play(
        self,
        entries: list[Entry],
        view: View = PLAIN,
        *,
        temperature: float,
        seeds: list[int] | None = None,
        progress: bool | str = False,  # pragma: no mutate (display only)
        step_limit: str | None = None,
        protocol: Protocol | None = None,
        leave: bool = True,  # pragma: no mutate (display only)
    ) -> list[EpisodeRollout]:
        """Play every entry to the end; rollouts come back in the order of `entries` (which may repeat).

        `seeds` (one per entry) key the sampling of each episode (seal.policy.generation); the default
        is a fixed seed per position. `step_limit` overrides the engine's (evaluation keeps its own
        protocol next to training's), and so does `protocol` (how the environment answers). `progress`
        shows the play's progress (seal.policy.progress: finished turns, episodes and tokens written, with the
        time left) on a bar on stderr and in run.log, labelled with it when it is a string (e.g. "eval before ·
        bfcl"); `leave=False` clears the bar when the play ends (a training round keeps one line a round)."""
        if seeds is None:
            seeds = [derive_seed(0, i) for i in range(len(entries))]  # pragma: no mutate (any fixed seeds)
        if len(seeds) != len(entries):
            raise ValueError(f"{len(seeds)} seeds for {len(entries)} entries")
        limit = step_limit or self.step_limit
        answers = protocol or self.protocol
        runs = [_Run(i, entry, view, self.max_steps_per_turn, int(seed), limit, answers)
                for i, (entry, seed) in enumerate(zip(entries, seeds))]
        queue, active = deque(runs), []
        model = self.model
        was_training = bool(model is not None and model.training)
        shown = _progress(runs, progress, leave) if progress else None  # pragma: no mutate (display only)
        if model is not None:
            model.eval()
        if self.generator is not None:
            self.generator.begin()
        try:
            while queue or active:
                while queue and len(active) < self.batch_size and self._room_for(active, queue[0]):
                    run = queue.popleft()
                    self._start(run)
                    active.append(run)
                if not active:  # pragma: no mutate (an invariant: _room_for admits the first episode)
                    raise RuntimeError("no episode could be admitted: the loop would never end")  # pragma: no mutate
                ready = []
                for run in active:
                    if run.episode.done:  # it ended before its first output (a conversation's user left at once)
                        continue
                    protocol = run.episode.protocol
                    if protocol.context_full(run.length, run.raw_length, self.max_new_tokens, self.context_length):
                        run.episode.abort()  # the context is full (the one reason abort defaults to)
                        run.drop_overflow(self.context_length, always=protocol.raw_context_limit)
                    else:
                        ready.append(run)
                tokens = 0
                if ready:
                    for run, out in zip(ready, self._step(ready, temperature)):
                        self._consume(run, out)
                        tokens += len(out.ids)
                still = []
                for run in active:
                    if run.episode.done:
                        if self.generator is not None:
                            self.generator.release(run.key)
                    else:
                        still.append(run)
                if shown is not None:  # pragma: no mutate block (display only)
                    ended = len(active) - len(still)
                    shown.advance(sum(_turns_done(run, shown) for run in active), episodes=ended, tokens=tokens)
                active = still
        finally:
            if self.generator is not None:
                self.generator.end()
            if model is not None and was_training:
                model.train()
            if shown is not None:
                shown.close()
        return [self._finish(run) for run in runs]

    def _room_for(self, active: list[_Run], run: _Run) -> bool:
        """Admit another episode only while the backend's memory plan has room for every active one."""
        capacity = getattr(self.generator, "capacity_tokens", None)
        if not active or capacity is None:
            return True
        in_flight = sum(r.length + self.max_new_tokens for r in active)
        return in_flight + self.prompt_tokens(run.entry, run.view) + self.max_new_tokens <= capacity()

    def _step(self, runs: list[_Run], temperature: float) -> list[Generated]:
        """One assistant message for every run: the oracle's script, or the backend's generation."""
        if self.oracle:
            return [self._oracle_output(run) for run in runs]
        t0 = time.perf_counter()
        requests = [
            GenerationRequest(key=r.key, ids=r.prompt_ids + r.ids, seed=r.seed, max_new_tokens=self.max_new_tokens,
                              shared_prefix=r.system_len)
            for r in runs
        ]
        outputs = self.generator.generate(requests, temperature=temperature, stops=self.stops)
        share = (time.perf_counter() - t0) / len(runs)
        for run in runs:
            run.timings["generation"] += share
        return outputs

    def _oracle_output(self, run: _Run) -> Generated:
        ids = self._encode(oracle_message(run.episode, run.entry, self.format)) + self.eot_ids
        return Generated(ids, [0.0] * len(ids), tuple(self.eot_ids))

    def _start(self, run: _Run) -> None:
        # an episode that ends before its first turn (a conversational benchmark's user left or failed at
        # once) keeps the entry's own first turn as its prompt, and no output
        turn = run.episode.next_turn() or TurnStart.of(run.entry, 0)
        text, run.prompt_ids, run.system_len = self._prompt(run.entry, run.view, turn)
        run.segments.append(Segment(text, list(run.prompt_ids), False))

    def _consume(self, run: _Run, out: Generated) -> None:
        """Append one step's model tokens, run its calls, append what the environment answers."""
        t0 = time.perf_counter()
        episode, view, fmt = run.episode, run.view, self.format
        text = self._decode(out.ids)
        run.append(text, out.ids, True, out.logprobs)
        content = text
        if out.stop is not None:
            stop_text = self._decode(list(out.stop))
            if content.endswith(stop_text):
                content = content[: -len(stop_text)]
        # a message cut at max_new_tokens, or ended by a stop that is not the template's own message end
        # (a bare end-of-text), is closed the way the template closes it
        env = "" if out.stop in self.closing else fmt.chat.end_of_turn
        env += fmt.after_assistant()
        parsed = fmt.parse_for(content, episode.protocol.strict_parse)
        visible = run.entry.visible_function_names(episode.turn)
        # a training interface's recovery feedback follows an output whose call blocks all failed
        feedback = view.parse_error_feedback(parsed.failures, visible) if parsed.failures else None
        keep = feedback is not None and not parsed.calls
        outcome = episode.step(parsed.calls, content, parsed.failures, len(out.ids), keep_turn=keep)
        answer, raw = self._answer(run, outcome, feedback, visible)
        after = ""
        if outcome.turn_over and not episode.done:
            turn = episode.next_turn()
            if turn is not None:
                after = turn_text(fmt, view, turn)
        if not episode.done:
            ids = self._encode(env + answer + after)
            run.append(env + answer + after, ids, False)
            if raw != answer:
                run.clipped_tokens += len(self._encode(env + raw + after)) - len(ids)
        run.timings["execution"] += time.perf_counter() - t0

    def _answer(self, run: _Run, outcome: Any, feedback: str | None, visible: frozenset[str]) -> tuple[str, str]:
        """What the environment says back, as the model reads it and unclipped."""
        protocol = run.episode.protocol
        # the release counts with the tokenizer's defaults (cmt_base.py:206)
        shown = environment_answer(self.format, protocol, run.view, outcome, feedback, visible,
                                   lambda text: len(self.tokenizer(text)["input_ids"]))
        if protocol.max_observation_tokens is None:
            return shown, shown
        return shown, environment_answer(self.format, protocol, run.view, outcome, feedback, visible)

    def _finish(self, run: _Run) -> EpisodeRollout:
        t0 = time.perf_counter()
        verdict = run.episode.verdict()
        run.timings["verification"] = time.perf_counter() - t0  # once per episode
        return EpisodeRollout(
            entry=run.entry, episode=run.episode, verdict=verdict, prompt_ids=run.prompt_ids,
            completion_ids=run.ids, completion_mask=run.mask, logprobs=run.logprobs,
            num_model_tokens=sum(run.mask), ended=run.episode.ended, timings=run.timings,
            transcript=run.segments,
        )


def environment_answer(fmt: ToolFormat, protocol: Protocol, view: View, outcome: Any, feedback: str | None,
                       visible: frozenset[str], count_tokens: Any = None) -> str:
    """What the environment says back to a step that kept the turn open ("" when it closed it).

    Under a refusing protocol the `[ERROR]` line comes first and, when the training interface has
    recovery feedback for the malformed output (phi_err), the feedback follows it on the next line, as
    the release's own hints followed its error (bfcl_env.py:1366-1410): the refusal's text never changes,
    only what follows it. Without a refusal the feedback is a tool response, as under BFCL's protocol.
    `count_tokens` (None: nothing is clipped) measures a message for the protocol's clip."""
    if outcome.turn_over:
        return ""
    clip = None
    if protocol.max_observation_tokens is not None and count_tokens is not None:
        clip = lambda text: protocol.clip(text, count_tokens)  # noqa: E731
    if outcome.error is not None:
        text = outcome.error + (f"\n{feedback}" if feedback is not None else "")
        return fmt.error_message(clip(text) if clip else text)
    # no records: the recovery feedback kept the turn open
    results = [view.tool_response(r, visible) for r in outcome.records] if outcome.records else [feedback]
    return fmt.tool_results(results, protocol.tool_response_newline, clip)


def _progress(runs: list[_Run], label: bool | str, leave: bool):  # pragma: no mutate block (display only)
    """The progress of a play, counted in turns: every episode's turns as known at its start."""
    from seal.policy.progress import Progress

    return Progress(label if isinstance(label, str) else "episodes", sum(r.turns_planned for r in runs), unit="turn",
                    episodes=len(runs), leave=leave)


def _turns_done(run: _Run, shown: Any) -> int:  # pragma: no mutate block (display only)
    """The turns of `run` finished since the last count: every planned turn once the episode has ended (an
    episode that ended early skips the rest), and the turns a conversation added beyond those planned."""
    episode = run.episode
    finished = episode.turn + (0 if episode.in_turn else 1)
    if episode.done:
        finished = max(finished, run.turns_planned)
    if finished > run.turns_planned:
        shown.grow(finished - run.turns_planned)
        run.turns_planned = finished
    new, run.turns_counted = finished - run.turns_counted, finished
    return max(new, 0)

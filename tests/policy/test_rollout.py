"""The rollout engine: protocol, token accounting, KV cache and batching correctness, reproducibility."""

from types import SimpleNamespace

import pytest
import torch

from seal.env.benchmarks.bfcl_v3 import CATEGORIES
from seal.env.protocol import BFCL, RELEASE
from seal.interface.view import PLAIN, PlainView
from seal.policy.formats import FORMATS, get_format
from seal.policy.generation import Generated, derive_seed
from seal.policy.rollout import ORACLE_REPLY, RolloutEngine

NAMES = sorted(FORMATS)
# every format under its default chat wrapper, and the JSON/Python formats under the other wrapper
SETUPS = [(n, None) for n in NAMES] + [("qwen_xml", "llama3"), ("llama3_json", "chatml"), ("bfcl_python", "llama3")]


def seeds(n, base):
    return [derive_seed(base, i) for i in range(n)]


def engine(policy, name="qwen_xml", chat=None, **kw):
    args = dict(context_length=16384, max_new_tokens=8, batch_size=4, max_steps_per_turn=20)
    args.update(kw)
    return RolloutEngine(policy, get_format(name, chat), **args)


def check_accounting(engine_, rollout):
    """Ids, mask and logprobs line up; every appended piece decodes back to its text; nothing re-tokenised."""
    r = rollout
    assert len(r.completion_ids) == len(r.completion_mask) == len(r.logprobs)
    step_tokens = sum(s.num_tokens for turn in r.episode.steps for s in turn)
    assert r.num_model_tokens == sum(r.completion_mask) == step_tokens
    assert r.transcript[0].ids == r.prompt_ids and r.transcript[0].model is False
    assert all(type(s.model) is bool for s in r.transcript)  # the flag is written out as JSON true/false
    assert [i for s in r.transcript for i in s.ids] == r.prompt_ids + r.completion_ids
    assert [int(s.model) for s in r.transcript[1:] for _ in s.ids] == r.completion_mask
    for s in r.transcript:
        assert engine_._decode(s.ids) == s.text
    for m, lp in zip(r.completion_mask, r.logprobs):
        assert (lp == 0.0) if not m else lp <= 0.0


# ---------------------------------------------------------------------------------------- oracle


@pytest.mark.parametrize("name, chat", SETUPS)
def test_oracle_passes_entries_of_every_category(oracle_policy, spread_entries, name, chat):
    eng = engine(oracle_policy, name, chat, oracle=True, context_length=10**6, batch_size=16)
    rollouts = eng.play(spread_entries, temperature=0.0)
    assert [r.entry.id for r in rollouts] == [e.id for e in spread_entries]
    failed = [(r.entry.id, r.verdict.error_type) for r in rollouts if not r.verdict.valid]
    assert failed == []
    for r in rollouts[::7]:
        check_accounting(eng, r)
        assert r.ended == "completed" and r.reward == 1.0


@pytest.mark.costly
@pytest.mark.parametrize("protocol", [BFCL, RELEASE], ids=["bfcl", "release"])
def test_oracle_passes_all_800_entries(oracle_policy, bench, protocol):
    # one pass over the benchmark, the entries dealt round-robin to the formats (each format also
    # plays every category in test_oracle_passes_entries_of_every_category); the gold calls are well
    # formed, so the release's strict parse never fires
    entries = list(bench.values())
    failed, ended = [], set()
    for k, name in enumerate(NAMES):
        eng = engine(oracle_policy, name, oracle=True, context_length=10**6, batch_size=32, protocol=protocol)
        rollouts = eng.play(entries[k::len(NAMES)], temperature=0.0)
        assert len(rollouts) == len(entries[k::len(NAMES)])
        failed += [(r.entry.id, r.verdict.error_type) for r in rollouts if not r.verdict.valid]
        ended |= {r.ended for r in rollouts}
    # BFCL's own gold calls a held-out tool before its delivery in some entries (multi_turn_miss_func_49
    # calls `tail` in turn 1, delivered in turn 3): the release refuses that call (env_handler.py:357-362),
    # so under its protocol the gold path cannot pass those entries; BFCL's harness runs it
    early = [e.id for e in entries if any(c.split("(")[0] not in e.visible_function_names(i)
                                          for i, turn in enumerate(e.gold) for c in turn)]
    assert early == ["multi_turn_miss_func_49"]
    expected = [] if protocol is BFCL else early
    assert len(entries) == 800 and [i for i, _ in failed] == expected and ended == {"completed"}


def test_oracle_script_and_holdout_delivery(oracle_policy, bench):
    entry = bench["multi_turn_miss_func_0"]
    (holdout_turn,) = entry.holdout
    eng = engine(oracle_policy, "qwen_xml", oracle=True, context_length=10**6)
    (r,) = eng.play([entry], temperature=0.0)
    for t, steps in enumerate(r.episode.steps):
        assert steps[-1].raw == ORACLE_REPLY and len(steps) == (2 if entry.gold[t] else 1)
    texts = [s.text for s in r.transcript if not s.model]
    holdout = [t for t in texts if "I have updated some more functions" in t]
    assert len(holdout) == 1 and entry.holdout[holdout_turn][0]["name"] in holdout[0]
    assert entry.holdout[holdout_turn][0]["name"] not in r.transcript[0].text


# ---------------------------------------------------------------------------------------- tiny random model


@pytest.mark.costly
@pytest.mark.parametrize("name, chat", SETUPS)
def test_tiny_random_plays_complete_episodes(tiny_policy, short_entries, name, chat):
    eng = engine(tiny_policy, name, chat, batch_size=3)
    rollouts = eng.play(short_entries[::2], temperature=1.0, seeds=seeds(len(short_entries[::2]), 0))
    for r, e in zip(rollouts, short_entries[::2]):
        assert r.entry is e and r.ended in ("completed", "force_terminated") and r.verdict is not None
        assert len(r.episode.steps) >= 1 and r.timings["generation"] > 0
        check_accounting(eng, r)


@pytest.mark.costly
@pytest.mark.parametrize("chunk", [1024, 97])
def test_logprobs_match_a_full_forward_pass(tiny_policy, short_entries, monkeypatch, chunk):
    """The cached, batched, padded, chunked generation scores every sampled token as one plain forward does."""
    from seal.policy import generation_hf

    monkeypatch.setattr(generation_hf, "PREFILL_CHUNK", chunk)
    eng = engine(tiny_policy, max_new_tokens=6, batch_size=4)
    temperature = 0.7
    rollouts = eng.play(short_entries[:3], temperature=temperature, seeds=seeds(3, 3))
    model = tiny_policy.model
    for r in rollouts:
        ids = torch.tensor([r.prompt_ids + r.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, :-1].float()
        logp = torch.log_softmax(logits / temperature, -1).gather(1, ids[0, 1:, None]).squeeze(1)
        start = len(r.prompt_ids) - 1
        model_pos = [i for i, m in enumerate(r.completion_mask) if m]
        expected = logp[start:][model_pos]
        got = torch.tensor([r.logprobs[i] for i in model_pos])
        assert torch.allclose(got, expected, atol=1e-4), (got - expected).abs().max()


@pytest.mark.costly
def test_kv_cache_gives_the_same_greedy_tokens_as_full_reprefill(tiny_policy, short_entries):
    cached = engine(tiny_policy, max_new_tokens=12, batch_size=4)
    full = engine(tiny_policy, max_new_tokens=12, batch_size=4, kv_cache=False)
    a = cached.play(short_entries[:4], temperature=0.0)
    b = full.play(short_entries[:4], temperature=0.0)
    for x, y in zip(a, b):
        assert x.completion_ids == y.completion_ids and x.completion_mask == y.completion_mask
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)


@pytest.mark.costly
def test_batched_play_equals_one_at_a_time(tiny_policy, short_entries):
    entries = short_entries[:3] + short_entries[:1]  # a repeated entry (a GRPO group) shares its prefill
    batched = engine(tiny_policy, max_new_tokens=10, batch_size=4).play(entries, temperature=0.0)
    single = engine(tiny_policy, max_new_tokens=10, batch_size=1).play(entries, temperature=0.0)
    for x, y in zip(batched, single):
        assert x.completion_ids == y.completion_ids
        assert x.logprobs == pytest.approx(y.logprobs, abs=1e-4)
    assert batched[0].completion_ids == batched[3].completion_ids


@pytest.mark.costly
def test_same_seed_same_rollouts(tiny_policy, short_entries):
    eng = engine(tiny_policy, max_new_tokens=8, batch_size=4)
    entries = [short_entries[0]] * 4

    def ids(seed):
        return [r.completion_ids for r in eng.play(entries, temperature=1.0, seeds=seeds(4, seed))]

    first = ids(7)
    assert ids(7) == first and ids(8) != first
    assert len({tuple(x) for x in first}) > 1  # a group samples different continuations


@pytest.mark.costly
def test_training_mode_is_restored_and_peft_models_work(tiny_policy, short_entries):
    from peft import get_peft_model

    from seal.policy.backbones import TinyRandomBackbone

    backbone = TinyRandomBackbone(lora={"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]})
    model = get_peft_model(backbone.load().model, backbone.peft_config())
    model.config.use_cache = False  # as gradient checkpointing does
    eng = engine(tiny_policy, max_new_tokens=4)
    eng.model = model
    model.train()
    (r,) = eng.play(short_entries[:1], temperature=1.0, seeds=[0])
    assert model.training and r.num_model_tokens > 0
    model.eval()
    eng.play(short_entries[:1], temperature=0.0)
    assert not model.training


# ---------------------------------------------------------------------------------------- protocol edges


class Scripted(RolloutEngine):
    """An engine whose 'model' says scripted texts (one per step), then a plain reply."""

    def __init__(self, policy, name, texts, **kw):
        args = dict(context_length=10**6, max_new_tokens=64, batch_size=4, oracle=True)
        args.update(kw)
        super().__init__(policy, get_format(name), **args)
        self.texts = list(texts)

    def _oracle_output(self, run):
        text = self.texts.pop(0) if self.texts else "Done."
        ids = self._encode(text) + self.eot_ids
        return Generated(ids, [0.0] * len(ids), tuple(self.eot_ids))


BAD = {
    "qwen_xml": ['<tool_call>{"name": "cd", "argu', "<tool_call>__import__('os').system('ls')</tool_call>",
                 '<tool_call>{"name": "cd", "arguments": {"folder": ' + "[" * 50 + "]" * 50 + "}}</tool_call>"],
    "llama3_json": ['{"name": "cd", "parameters": {"folder": "doc', '{"name": "cd", "parameters": "nope"}'],
    "bfcl_python": ["[cd(folder='doc", "__import__('os').system('ls')", "[open('x').read()]"],
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("which", [0, 1])
def test_malformed_output_ends_the_turn_and_is_recorded(oracle_policy, bench, name, which):
    entry = bench["multi_turn_base_0"]
    eng = Scripted(oracle_policy, name, [BAD[name][which]])
    (r,) = eng.play([entry], temperature=0.0)
    first = r.episode.steps[0]
    assert len(first) == 1 and first[0].parse_failures and not first[0].calls
    assert r.episode.result[0] == [] and r.ended == "completed" and len(r.episode.steps) == entry.num_turns
    check_accounting(eng, r)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_tool_and_bad_arguments_run_as_errors_and_the_turn_goes_on(oracle_policy, bench, name):
    from seal.env.calls import ToolCall

    fmt = get_format(name)
    texts = [fmt.render_calls([ToolCall("launch_rocket", (), {})], {}),
             fmt.render_calls([ToolCall("cd", (), {"no_such_argument": 1})], {})]
    eng = Scripted(oracle_policy, name, texts)
    (r,) = eng.play([bench["multi_turn_base_0"]], temperature=0.0)
    steps = r.episode.steps[0]
    assert [s.calls[0].error for s in steps[:2]] == ["unknown_function", "bad_arguments"]
    assert "name 'launch_rocket' is not defined" in r.transcript[2].text


def test_text_only_output_ends_the_turn(oracle_policy, bench):
    eng = Scripted(oracle_policy, "qwen_xml", ["I am not sure what to do."])
    (r,) = eng.play([bench["multi_turn_base_0"]], temperature=0.0)
    assert len(r.episode.steps[0]) == 1 and r.episode.steps[0][0].parse_failures == []
    assert r.verdict.error_type == "multi_turn:empty_turn_model_response"


class Coaching(PlainView):
    def tool_response(self, record, visible):
        return record.observation + ("" if record.ok else " [hint: check the schema]")

    def parse_error_feedback(self, failures, visible):
        return f"Could not parse your call ({len(failures)} failure). Available tools: {len(visible)}."


def test_views_shape_what_the_learner_sees(oracle_policy, bench):
    fmt = get_format("qwen_xml")
    from seal.env.calls import ToolCall

    eng = Scripted(oracle_policy, "qwen_xml", ['<tool_call>{"name": "cd", "argu',
                                               fmt.render_calls([ToolCall("launch_rocket", (), {})], {})])
    (r,) = eng.play([bench["multi_turn_base_0"]], Coaching(), temperature=0.0)
    steps = r.episode.steps[0]
    # the parse failure did not end the turn: feedback was shown and the model went on
    assert steps[0].parse_failures and len(steps) == 3 and steps[1].calls
    env = [s.text for s in r.transcript[1:] if not s.model]
    assert "Could not parse your call (1 failure)" in env[0] and "[hint: check the schema]" in env[1]
    # the message closed itself (<|im_end|>): ChatML's newline, then the feedback as a tool response
    assert env[0].startswith("\n<|im_start|>user\n<tool_response>\nCould not parse your call")
    check_accounting(eng, r)


def test_step_limit_force_terminates(oracle_policy, bench):
    fmt = get_format("bfcl_python")
    eng = Scripted(oracle_policy, "bfcl_python", ["[pwd()]"] * 10, max_steps_per_turn=3)
    (r,) = eng.play([bench["multi_turn_base_0"]], temperature=0.0)
    assert r.ended == "force_terminated" and not r.verdict.valid and fmt.name == "bfcl_python"


def test_episode_step_limit_and_the_per_play_override(oracle_policy, bench):
    entry = bench["multi_turn_base_0"]
    eng = Scripted(oracle_policy, "bfcl_python", ["[pwd()]"] * 10, max_steps_per_turn=3, step_limit="episode")
    (r,) = eng.play([entry], temperature=0.0)
    # three model outputs in all, then the force-quit (no fourth query)
    assert r.ended == "force_terminated" and [len(t) for t in r.episode.steps] == [3]
    # evaluation keeps BFCL's rule on the same engine: more than 3 steps in the turn
    eng.texts = ["[pwd()]"] * 10
    (r,) = eng.play([entry], temperature=0.0, step_limit="turn")
    assert r.ended == "force_terminated" and [len(t) for t in r.episode.steps] == [4]


def test_context_overflow_is_a_clean_failure(oracle_policy, short_entries):
    entry = short_entries[0]
    n = engine(oracle_policy, oracle=True).prompt_tokens(entry)
    # the prompt and one message of max_new_tokens do not fit
    (r,) = engine(oracle_policy, oracle=True, context_length=n + 7, max_new_tokens=8).play([entry], temperature=0.0)
    assert r.ended == "context_overflow" and r.completion_ids == [] and r.verdict.error_type == "seal:context_overflow"
    # exactly fits: the first message is written, the episode outgrows the window later
    (r,) = engine(oracle_policy, oracle=True, context_length=n + 8, max_new_tokens=8).play([entry], temperature=0.0)
    assert r.ended == "context_overflow" and r.num_model_tokens > 0 and not r.verdict.valid
    # it stopped before a step that could not fit: what it has plus one more message is over the window
    assert len(r.prompt_ids) + len(r.completion_ids) + 8 > n + 8


def test_only_an_environment_piece_past_the_window_is_dropped(bench):
    from seal.policy.rollout import Segment, _Run

    def played(*pieces):
        """A run with a 4-token prompt, then (ids, model?) pieces; model tokens carry logprob -1."""
        run = _Run(0, next(iter(bench.values())), PLAIN, 20, 0, "turn")
        run.prompt_ids = [1, 2, 3, 4]
        run.segments.append(Segment("prompt", [1, 2, 3, 4], False))
        for ids, model in pieces:
            run.append("x", ids, model, [-1.0] * len(ids) if model else None)
        return run

    def state(run):
        return run.ids, run.mask, run.logprobs, [s.ids for s in run.segments[1:]]

    # 4 prompt + 2 model + 3 environment tokens = 9: over a window of 8, the environment's 3 go
    run = played(([5, 6], True), ([7, 8, 9], False))
    run.drop_overflow(8)
    assert state(run) == ([5, 6], [1, 1], [-1.0, -1.0], [[5, 6]])
    # within the window (9 <= 9) nothing goes, unless always (the release drops the last message anyway)
    run = played(([5, 6], True), ([7, 8, 9], False))
    run.drop_overflow(9)
    assert state(run) == ([5, 6, 7, 8, 9], [1, 1, 0, 0, 0], [-1.0, -1.0, 0.0, 0.0, 0.0], [[5, 6], [7, 8, 9]])
    run.drop_overflow(9, always=True)
    assert state(run) == ([5, 6], [1, 1], [-1.0, -1.0], [[5, 6]])
    # a model piece last, or the prompt alone, is never dropped
    run = played(([5, 6], False), ([7, 8], True))
    run.drop_overflow(1, always=True)
    assert state(run) == ([5, 6, 7, 8], [0, 0, 1, 1], [0.0, 0.0, -1.0, -1.0], [[5, 6], [7, 8]])
    run = played()
    run.drop_overflow(1, always=True)
    assert (state(run), [s.ids for s in run.segments]) == (([], [], [], []), [[1, 2, 3, 4]])


def test_an_output_both_malformed_and_calling_a_held_out_tool_reads_the_parse_error(oracle_policy, bench):
    # miss_func_0 holds `sort` out until turn 3. The output runs cd, calls sort, then writes a malformed
    # block. The release's answer to the same text (its parser and env_handler run in a scratch folder):
    # the parse error, because bfcl_env.py:1150 refuses before env_handler.py:357-362 looks at names;
    # nothing runs and the turn stays open for the next output
    text = ('<tool_call>\n{"name": "cd", "arguments": {"folder": "document"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "sort", "arguments": {"file_name": "final_report.pdf"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "cd", "arguments": {folder}}\n</tool_call>')
    error = ("[ERROR] Invalid tool call format: Invalid tool call JSON: Expecting property name enclosed in double "
             "quotes: line 1 column 30 (char 29)")
    (r,) = Scripted(oracle_policy, "qwen_xml", [text], protocol=RELEASE).play([bench["multi_turn_miss_func_0"]],
                                                                             temperature=0.0)
    first = r.episode.steps[0]
    assert first[0].error == error and first[0].calls == [] and r.episode.result[0] == []
    assert r.transcript[2].text == f"\n<|im_start|>user\n{error}<|im_end|>\n<|im_start|>assistant\n"
    # the turn went on: the next output ("Done.") closed it
    assert len(first) == 2 and first[1].raw == "Done."


class Flood(PlainView):
    """Every tool answers 6,000 words: 6,001 tokens of the oracle's tokenizer, over the release's 4,096."""

    FLOOD = "word " * 6000

    def tool_response(self, record, visible):
        return self.FLOOD


PWD_CALL = '<tool_call>\n{"name": "pwd", "arguments": {}}\n</tool_call>'


def test_the_release_stops_on_the_unclipped_context_at_the_limit_and_bfcl_past_it(oracle_policy, bench):
    entry, m = bench["multi_turn_base_0"], 64
    fmt = get_format("qwen_xml")
    assert len(oracle_policy.tokenizer(Flood.FLOOD)["input_ids"]) == 6001
    # by hand: after the first output (a call) the release's conversation holds the prompt, the output and
    # the tool message; its context check (cmt_linear.py:109-123) tokenises the *unclipped* message
    # (content, not content_for_future) and is safe only while that count is below max_model_len -
    # response_length, i.e. below C - m here (agent_flow.py:94-99 stops before the next model call)
    (probe,) = Scripted(oracle_policy, "qwen_xml", [PWD_CALL], max_new_tokens=m, protocol=RELEASE).play(
        [entry], Flood(), temperature=0.0)
    prompt, output, shown = probe.transcript[0].ids, probe.transcript[1].ids, probe.transcript[2].ids
    assert probe.transcript[2].text.endswith("... truncate ...<|im_end|>\n<|im_start|>assistant\n")
    # ChatML closes the output with "\n", then the tool message (the release's newline) and the next header
    raw = oracle_policy.tokenizer("\n" + fmt.tool_results([Flood.FLOOD], newline=True), add_special_tokens=False)["input_ids"]
    raw_length = len(prompt) + len(output) + len(raw)
    assert len(raw) > 6000 > 4200 > len(shown)

    def outputs(protocol, context):
        eng = Scripted(oracle_policy, "qwen_xml", [PWD_CALL, "Done."], max_new_tokens=m, context_length=context,
                       protocol=protocol)
        (r,) = eng.play([entry], Flood(), temperature=0.0)
        return r, r.episode.model_steps

    # at the limit the release stops although the clipped copy it shows would leave ~1,800 tokens to spare
    r, steps = outputs(RELEASE, raw_length + m)
    assert (r.ended, steps) == ("context_overflow", 1) and len(prompt) + len(output) + len(shown) + m < raw_length + m
    # the release drops the last environment message at the end (cmt_linear.py:163-165)
    assert r.transcript[-1].model and r.completion_ids == output
    # one token more and the model writes its next output
    assert outputs(RELEASE, raw_length + m + 1)[1] >= 2
    # the unclipped count adds up over the episode: after two floods the release stops at the limit
    two = len(prompt) + 2 * (len(output) + len(raw))
    eng = Scripted(oracle_policy, "qwen_xml", [PWD_CALL, PWD_CALL, "Done."], max_new_tokens=m, context_length=two + m,
                   protocol=RELEASE)
    (r,) = eng.play([entry], Flood(), temperature=0.0)
    assert (r.ended, r.episode.model_steps) == ("context_overflow", 2)
    # BFCL shows the message whole (no newline before its end) and stops only when the next output could
    # pass the window: not at equality, one token later
    whole = oracle_policy.tokenizer("\n" + fmt.tool_results([Flood.FLOOD]), add_special_tokens=False)["input_ids"]
    bfcl_length = len(prompt) + len(output) + len(whole)
    r, steps = outputs(BFCL, bfcl_length + m)
    assert steps >= 2 and r.transcript[2].ids == whole
    r, steps = outputs(BFCL, bfcl_length + m - 1)
    assert (r.ended, steps) == ("context_overflow", 1)


class FloodedHint(Flood):
    """A training view whose recovery hint for a malformed output is the flood; tools it shows only when visible."""

    def tool_response(self, record, visible):
        return self.FLOOD if record.call.name in visible else "hidden"

    def parse_error_feedback(self, failures, visible):
        return self.FLOOD


def test_the_release_counts_a_refusals_hint_and_a_visible_tools_answer_unclipped(oracle_policy, bench):
    entry, m = bench["multi_turn_base_0"], 64
    fmt = get_format("qwen_xml")
    malformed = '<tool_call>\n{"name": "pwd", "arguments": {</tool_call>'
    (probe,) = Scripted(oracle_policy, "qwen_xml", [malformed, PWD_CALL], max_new_tokens=m, protocol=RELEASE).play(
        [entry], FloodedHint(), temperature=0.0)
    error = probe.episode.steps[0][0].error
    assert error.startswith("[ERROR]") and probe.transcript[2].text.endswith("... truncate ...<|im_end|>\n<|im_start|>assistant\n")
    # the release counts the refusal with its hint whole (ChatML's "\n" closes the output first)
    raw = oracle_policy.tokenizer("\n" + fmt.error_message(error + "\n" + Flood.FLOOD), add_special_tokens=False)["input_ids"]
    limit = len(probe.transcript[0].ids) + len(probe.transcript[1].ids) + len(raw)
    # pwd is visible in base_0's first turn: its flood is shown clipped and counted whole
    flood = oracle_policy.tokenizer("\n" + fmt.tool_results([Flood.FLOOD], newline=True), add_special_tokens=False)["input_ids"]
    assert probe.transcript[4].text.endswith("... truncate ...<|im_end|>\n<|im_start|>assistant\n")
    two = limit + len(probe.transcript[3].ids) + len(flood)
    for context, steps in ((limit + m, 1), (two + m, 2)):
        eng = Scripted(oracle_policy, "qwen_xml", [malformed, PWD_CALL, "Done."], max_new_tokens=m,
                       context_length=context, protocol=RELEASE)
        (r,) = eng.play([entry], FloodedHint(), temperature=0.0)
        assert (r.ended, r.episode.model_steps) == ("context_overflow", steps)


@pytest.mark.costly
def test_a_model_outgrowing_the_window_is_a_clean_failure(tiny_policy, short_entries):
    entry = short_entries[0]
    n = engine(tiny_policy, max_new_tokens=8).prompt_tokens(entry)
    (r,) = engine(tiny_policy, context_length=n + 40, max_new_tokens=8).play([entry], temperature=0.0)
    assert r.ended == "context_overflow" and not r.verdict.valid and r.num_model_tokens > 0
    # it stopped before a message that could not fit; an environment reply past the window is dropped
    length = len(r.prompt_ids) + len(r.completion_ids)
    assert length <= n + 40 and (r.transcript[-1].model or length + 8 > n + 40)


def test_an_episode_that_ends_before_its_first_turn_keeps_the_entrys_first_prompt(oracle_policy, bench, monkeypatch):
    from seal.env.benchmarks.bfcl_v3 import BFCLV3

    entry = bench["multi_turn_base_0"]  # its turns are of different lengths
    eng = engine(oracle_policy, oracle=True)
    (played,) = eng.play([entry], temperature=0.0)

    def user_left(self, episode):  # a conversation whose user leaves before saying anything
        episode.abort("user_left")

    monkeypatch.setattr(BFCLV3, "turns", lambda self, entry, backends: [])
    monkeypatch.setattr(BFCLV3, "next_messages", user_left)
    (r,) = eng.play([entry], temperature=0.0)
    assert (r.ended, r.completion_ids, r.num_model_tokens) == ("user_left", [], 0)
    assert r.prompt_ids == played.prompt_ids and [s.ids for s in r.transcript] == [played.prompt_ids]


def test_a_refusal_comes_first_then_the_interfaces_feedback_and_the_release_clips_both():
    from types import SimpleNamespace

    from seal.env.protocol import TRUNCATION_MARKER
    from seal.policy.rollout import environment_answer

    fmt = get_format("qwen_xml")
    refused = SimpleNamespace(turn_over=False, error="[ERROR] refused", records=[])

    def user_says(text):  # the release sends a refusal as a user message
        return fmt.turn_opening([{"role": "user", "content": text}])

    assert environment_answer(fmt, RELEASE, PLAIN, refused, "use <tool_call>", frozenset()) == user_says(
        "[ERROR] refused\nuse <tool_call>")
    assert environment_answer(fmt, RELEASE, PLAIN, refused, None, frozenset()) == user_says("[ERROR] refused")
    # over the release's 4,096 tokens (here one a word) the message is cut and marked, its refusal kept
    said = environment_answer(fmt, RELEASE, PLAIN, refused, " ".join(["hint"] * 5000), frozenset(),
                              lambda text: len(text.split()))
    assert TRUNCATION_MARKER in said
    assert "[ERROR] refused\nhint hint" in said and said.count("hint") < 4096


def test_prompt_tokens_is_the_prompt_length(oracle_policy, bench):
    eng = engine(oracle_policy, oracle=True)
    # the first turn's prompt, not the second's (base_0's turns are different lengths)
    entry = bench["multi_turn_base_0"]
    (r,) = eng.play([entry], temperature=0.0)
    assert eng.prompt_tokens(entry, PLAIN) == len(r.prompt_ids) == len(r.transcript[0].ids)
    assert eng.prompt_tokens(entry) == len(r.prompt_ids)


def test_a_prompt_length_is_kept_per_view_and_a_view_is_known_by_what_it_renders(oracle_policy, bench, monkeypatch):
    from seal.evaluation import evaluate
    from seal.interface import GUIDELINES, Omega, apply

    monkeypatch.setattr(evaluate, "_PROMPT_TOKENS", {})
    eng, fmt, entry = engine(oracle_policy, oracle=True), get_format("qwen_xml"), bench["multi_turn_base_1"]
    guided = apply(Omega(phi_cap=frozenset(GUIDELINES), version=1), fmt.call_example)
    annotated = apply(Omega(phi_schema=True, version=1), fmt.call_example)
    # each view's length is the one the engine renders and tokenises (the guidelines lengthen the prompt) ...
    lengths = {v: evaluate.prompt_tokens(eng, entry, v) for v in (PLAIN, guided, annotated)}
    assert lengths == {v: eng.prompt_tokens(entry, v) for v in (PLAIN, guided, annotated)}
    assert lengths[guided] > lengths[PLAIN] and lengths[annotated] != lengths[guided]
    # ... kept once each; a later round's view that renders the same text (only the version differs) reuses it
    assert len(evaluate._PROMPT_TOKENS) == 3
    calls = []
    monkeypatch.setattr(type(eng), "prompt_tokens", lambda self, e, v=PLAIN: calls.append(v) or 0)
    same = apply(Omega(phi_cap=frozenset(GUIDELINES), version=7), fmt.call_example)
    assert evaluate.prompt_tokens(eng, entry, same) == lengths[guided] and calls == []
    # another schema style renders other text: its own length
    release = apply(Omega(phi_schema=True, version=1), fmt.call_example, SimpleNamespace(schema_style="release",
                                                                                         schema_note=None))
    assert evaluate.prompt_tokens(eng, entry, release) == 0 and calls == [release]


def test_for_backbone_builds_from_config(tiny_policy):
    from seal.budget import Budget
    from seal.errors import UserError
    from seal.policy.backbones import TinyRandomBackbone
    from tests.test_configs import compose_with

    def budget(*overrides):
        return Budget.from_config(compose_with("budget.max_new_tokens=16", "budget.batch_size=2",
                                               "budget.max_steps_per_turn=5", *overrides).budget)

    eng = RolloutEngine.for_backbone(TinyRandomBackbone(tool_format="bfcl_python"), tiny_policy, budget())
    assert (eng.format.name, eng.format.chat.name, eng.max_new_tokens, eng.batch_size) == ("bfcl_python", "chatml", 16, 2)
    assert (eng.format.tools, eng.step_limit, eng.max_steps_per_turn) == ("project", "turn", 5)
    eng = RolloutEngine.for_backbone(TinyRandomBackbone(), tiny_policy, budget("budget.step_limit=episode",
                                     "budget.rollout_memory_gb=0.5", "budget.rollout_memory_fraction=0.3"),
                                     tool_rendering="release")
    assert (eng.format.tools, eng.step_limit, eng.protocol) == ("release", "episode", BFCL)
    # 0.5 GiB of KV cache, in bytes, and the budget's share of free memory
    assert eng.generator.memory_bytes == 2**29 and eng.generator.memory_fraction == 0.3
    eng = RolloutEngine.for_backbone(TinyRandomBackbone(), tiny_policy, budget(), protocol=RELEASE)
    assert eng.protocol is RELEASE
    # the chat template is the tokenizer's (SmolLM2's ChatML), not the tool format's usual one (Llama 3)
    assert get_format("llama3_json").chat.name == "llama3"
    eng = RolloutEngine.for_backbone(TinyRandomBackbone(tool_format="llama3_json"), tiny_policy, budget())
    assert (eng.format.name, eng.format.chat.name) == ("llama3_json", "chatml")
    # an unknown generation backend is refused by the backbone itself, before anything is loaded
    with pytest.raises(UserError, match="backbone.generation='bogus': choose transformers or vllm"):
        TinyRandomBackbone(generation="bogus")


def test_for_backbone_hands_the_oracle_the_dtype_and_vllm_their_settings(tiny_policy, monkeypatch):
    import dataclasses

    import torch

    import seal.policy.generation_vllm as gv
    from seal.budget import Budget
    from seal.policy.backbones import TinyRandomBackbone
    from seal.policy.oracle import OracleBackbone
    from tests.test_configs import compose_with

    class Recorded:
        def __init__(self, model_path, **kw):
            self.args = dict(kw, model_path=model_path)

    monkeypatch.setattr(gv, "VLLMGenerator", Recorded)
    budget = Budget.from_config(compose_with("budget.rollout_memory_gb=1.5").budget)
    # the oracle plays its script: no generator, whatever the budget's memory
    oracle = OracleBackbone()
    eng = RolloutEngine.for_backbone(oracle, oracle.load(), budget)
    assert eng.oracle and eng.generator is None and eng.model is None
    # activations and the KV cache in the policy's compute dtype, not the weights' float32; not vLLM's
    bf16 = dataclasses.replace(tiny_policy, compute_dtype=torch.bfloat16)
    eng = RolloutEngine.for_backbone(TinyRandomBackbone(), bf16, budget)
    assert not isinstance(eng.generator, Recorded)
    assert not eng.oracle and eng.generator.compute_dtype == torch.bfloat16
    backbone = TinyRandomBackbone(generation="vllm", context_length=4096, dtype="bfloat16",
                                  vllm={"gpu_memory_utilization": 0.4, "enforce_eager": True})
    eng = RolloutEngine.for_backbone(backbone, tiny_policy, budget)
    assert isinstance(eng.generator, Recorded)
    memory = gv.VLLMMemory(kv_cache_gib=1.5, gpu_memory_utilization=0.4)
    # (the engine-wide seed draws nothing: every request carries its own, seal.policy.generation_vllm.step_seed)
    eng.generator.args.pop("seed")
    assert eng.generator.args == {"model_path": backbone.model_path(), "dtype": "bfloat16", "context_length": 4096,
                                  "memory": memory, "enforce_eager": True}


def test_categories_are_covered(spread_entries):
    assert {e.category for e in spread_entries} == set(CATEGORIES)


def test_buffer_cache_layer_grows_and_selects_rows():
    from seal.policy.generation_hf import _BufferLayer

    layer = _BufferLayer(capacity=2)
    a, b = torch.randn(3, 2, 2, 4), torch.randn(3, 2, 3, 4)
    layer.update(a, a + 1)
    keys, values = layer.update(b, b + 1)
    assert layer.capacity >= 5 and torch.equal(keys, torch.cat([a, b], 2)) and torch.equal(values, torch.cat([a, b], 2) + 1)
    layer.batch_select_indices(torch.tensor([2, 0]))
    assert torch.equal(layer.keys, torch.cat([a, b], 2)[[2, 0]]) and layer.get_seq_length() == 5


def test_release_rendering_in_play_training_view_and_plain_view(oracle_policy, bench):
    from seal.interface import InterfaceConfig, Omega, apply

    entry = bench["multi_turn_miss_func_0"]
    (docs,) = entry.holdout.values()
    eng = RolloutEngine(oracle_policy, get_format("qwen_xml", tools="release"), context_length=10**6,
                        max_new_tokens=8, batch_size=2, oracle=True)
    train_view = apply(Omega(phi_schema=True), eng.format.call_example, InterfaceConfig(schema_style="release"))
    (trained,) = eng.play([entry], train_view, temperature=0.0)
    (plain,) = eng.play([entry], PLAIN, temperature=0.0)
    assert trained.verdict.valid and plain.verdict.valid
    system = trained.transcript[0].text
    assert system.startswith("<|im_start|>system\n# Tools\n") and "</tool_call>\n\nObservation note:" in system
    assert '"type": "dict"' in system and "[required]" in system
    # the held-out tool arrives as BFCL wrote it, without annotation
    (holdout,) = [s.text for s in trained.transcript if not s.model and '"name": "sort"' in s.text]
    assert "[required]" not in holdout
    # evaluation: nothing of the interface anywhere
    assert not any("[required]" in s.text or "Observation note" in s.text for s in plain.transcript)


def test_no_interface_text_names_a_tool_before_the_turn_that_delivers_it(oracle_policy, bench):
    import re

    from seal.interface import GUIDELINES, Omega, apply

    # miss_func_0 holds `sort` back until turn 3; in every turn the model calls an unknown tool, so the
    # recovery hint lists the tools it may use, then ends the turn in plain text
    entry = bench["multi_turn_miss_func_0"]
    assert {t: [d["name"] for d in docs] for t, docs in entry.holdout.items()} == {3: ["sort"]}
    fmt = get_format("qwen_xml")
    view = apply(Omega(phi_schema=True, phi_err=True, phi_cap=frozenset(GUIDELINES), version=1), fmt.call_example)
    unknown = '<tool_call>{"name": "sorty", "arguments": {"file_name": "a.txt"}}</tool_call>'
    eng = Scripted(oracle_policy, "qwen_xml", [unknown, "Done."] * entry.num_turns)
    (r,) = eng.play([entry], view, temperature=0.0)
    # what the environment said, without the user's own words (turn 2 asks, in English, to sort a file)
    env = [s.text for s in r.transcript if not s.model]
    for turn in entry.turns:
        for message in turn:
            env = [t.replace(message["content"], "") for t in env]
    (delivery,) = [i for i, t in enumerate(env) if "I have updated some more functions" in t]
    sort = re.compile(r"\bsort\b")
    hints = [i for i, t in enumerate(env) if "not one of the available tools" in t]
    assert len(hints) == entry.num_turns
    assert [i for i, t in enumerate(env[:delivery]) if sort.search(t)] == []
    # from the delivery on, the hints name it (the test would pass vacuously otherwise)
    assert [i for i in hints if i >= delivery and sort.search(env[i])] == [i for i in hints if i >= delivery] != []


def test_a_message_cut_at_max_new_tokens_is_closed_as_the_template_closes_one(oracle_policy, bench):
    class Cut(Scripted):
        # the first step's output stops at the token budget: no stop token at its end
        def _oracle_output(self, run):
            out = super()._oracle_output(run)
            if len(self.texts) == 1:
                return Generated(out.ids[: -len(self.eot_ids)], out.logprobs[: -len(self.eot_ids)], None)
            return out

    entry = bench["multi_turn_base_0"]
    eng = Cut(oracle_policy, "qwen_xml", ["I will look at the files", "Done."])
    (r,) = eng.play([entry], temperature=0.0)
    model = [i for i, s in enumerate(r.transcript) if s.model]
    cut, after = r.transcript[model[0]], r.transcript[model[0] + 1]
    assert cut.text == "I will look at the files" and not after.model
    # ChatML ends every message with <|im_end|> and a newline; the next turn's user message follows
    assert after.text.startswith("<|im_end|>\n<|im_start|>user\n")
    # a message that ended with its own stop token is not closed twice
    done = r.transcript[model[1]]
    assert done.text.endswith("<|im_end|>") and not r.transcript[model[1] + 1].text.startswith("<|im_end|>")
    check_accounting(eng, r)


class Budgeted:
    """A generation backend stand-in whose memory plan has room for `capacity` tokens (the oracle writes
    the messages); it records the play's calls to it."""

    model = None

    def __init__(self, capacity):
        self.capacity, self.calls = capacity, []

    def capacity_tokens(self):
        return self.capacity

    def begin(self):
        self.calls.append("begin")

    def end(self):
        self.calls.append("end")

    def release(self, key):
        self.calls.append(key)


class Widths(RolloutEngine):
    """The oracle, recording how many episodes each step continues."""

    def _step(self, runs, temperature):
        self.widths.append(len(runs))
        return super()._step(runs, temperature)


@pytest.mark.parametrize("spare, batch, first_width", [(0, 4, 2), (-1, 4, 1), (None, 4, 3), (None, 2, 2), (None, 1, 1)])
def test_episodes_are_admitted_while_the_memory_plan_has_room(oracle_policy, bench, spare, batch, first_width):
    from seal.interface import GUIDELINES, Omega, apply

    entry = bench["multi_turn_base_1"]
    fmt = get_format("qwen_xml")
    # the training view's guidelines lengthen the prompt: the plan counts the prompt the episode will get
    view = apply(Omega(phi_cap=frozenset(GUIDELINES), version=1), fmt.call_example)
    probe = engine(oracle_policy, oracle=True)
    p, m = probe.prompt_tokens(entry, view), 16
    assert p > probe.prompt_tokens(entry) + 2 * m
    # room for exactly two fresh episodes (prompt + one message each), one token less, or no plan at all
    generator = Budgeted(None if spare is None else 2 * (p + m) + spare)
    if spare is None:
        generator.capacity_tokens = None
    eng = Widths(oracle_policy, fmt, context_length=16384, max_new_tokens=m, batch_size=batch,
                 oracle=True, generator=generator)
    eng.widths = []
    out = eng.play([entry] * 3, view, temperature=0.0)
    assert eng.widths[0] == first_width and max(eng.widths) <= min(batch, 3)
    assert all(r.verdict.valid for r in out)
    # the backend is opened once, told once about each finished episode, and closed
    assert generator.calls[0] == "begin" and generator.calls[-1] == "end"
    assert sorted(generator.calls[1:-1]) == [0, 1, 2]


def test_a_seed_per_entry_is_required(oracle_policy, bench):
    eng = engine(oracle_policy, oracle=True)
    with pytest.raises(ValueError, match="^1 seeds for 2 entries$"):
        eng.play([bench["multi_turn_base_1"]] * 2, temperature=0.0, seeds=[3])


class Echo:
    """A generation backend stand-in: answers every request with one fixed message after `delay`
    seconds per batch, and records what it was asked."""

    model = None

    def __init__(self, ids, delay=0.02):
        self.ids, self.delay, self.asked, self.spent = ids, delay, [], 0.0
        # whether the model was in training mode at each call (when a model stand-in is set)
        self.modes = []

    def begin(self):
        pass

    def end(self):
        pass

    def release(self, key):
        pass

    def generate(self, requests, *, temperature, stops):
        import time

        t0 = time.perf_counter()
        time.sleep(self.delay)
        self.asked.append((list(requests), temperature, stops))
        if self.model is not None:
            self.modes.append(self.model.training)
        self.spent += time.perf_counter() - t0
        return [Generated(list(self.ids), [-0.5] * len(self.ids), tuple(self.ids[-1:])) for _ in requests]


def test_each_step_asks_the_backend_for_every_active_episode(oracle_policy, bench):
    fmt = get_format("qwen_xml")
    probe = RolloutEngine(oracle_policy, fmt, context_length=16384, max_new_tokens=8, batch_size=2, oracle=True)
    reply = probe._encode("Done.") + probe.eot_ids
    echo = Echo(reply, delay=0.1)
    eng = RolloutEngine(oracle_policy, fmt, context_length=16384, max_new_tokens=8, batch_size=2, generator=echo)
    entries = [bench["multi_turn_base_1"], bench["multi_turn_base_3"]]
    out = eng.play(entries, temperature=0.7, seeds=[11, 12])
    # a text reply ends each turn: one step per turn, both episodes in every step while both last
    assert len(echo.asked) == max(e.num_turns for e in entries)
    first, temperature, stops = echo.asked[0]
    assert temperature == 0.7 and stops == eng.stops
    assert [(r.key, r.seed, r.max_new_tokens) for r in first] == [(0, 11, 8), (1, 12, 8)]
    for request, rollout in zip(first, out):
        assert request.ids == rollout.prompt_ids
        # the shared prefix is exactly the system message: it ends where the user's turn begins
        head = eng._decode(request.ids[: request.shared_prefix])
        assert head.startswith("<|im_start|>system") and head.endswith("<|im_end|>\n")
        assert eng._decode(request.ids[request.shared_prefix :]).startswith("<|im_start|>user")
    # a later step continues the sequence so far: prompt + every appended token
    second = echo.asked[1][0][0]
    assert second.ids[: len(out[0].prompt_ids)] == out[0].prompt_ids and len(second.ids) > len(out[0].prompt_ids)
    for r in out:
        # the model's tokens carry the backend's logprobs; the rest 0.0
        assert {lp for m, lp in zip(r.completion_mask, r.logprobs) if m} == {-0.5}
        assert r.num_model_tokens == len(reply) * r.entry.num_turns
    # each batch's time is split over the episodes it continued: together they took every batch's time
    total = sum(r.timings["generation"] for r in out)
    assert echo.spent <= total <= echo.spent * 1.5
    # the other parts of each episode's time are measured too, and no more than the whole play
    for r in out:
        assert 0.0 < r.timings["execution"] and 0.0 < r.timings["verification"]
        assert r.timings["execution"] + r.timings["verification"] + r.timings["generation"] < 60


def test_the_engine_builds_its_backend_from_the_policy(tiny_policy, oracle_policy):
    import inspect
    from types import SimpleNamespace

    from seal.env.episode import MAXIMUM_STEP_LIMIT
    from seal.errors import UserError
    from seal.policy.generation_hf import TransformersGenerator
    from seal.policy.backbones import Policy

    eng = engine(tiny_policy, kv_cache=False, memory_bytes=123, compute_dtype=torch.bfloat16)
    gen = eng.generator
    assert isinstance(gen, TransformersGenerator) and gen.model is tiny_policy.model and eng.model is tiny_policy.model
    assert (gen.kv_cache, gen.memory_bytes, gen.compute_dtype) == (False, 123, torch.bfloat16)
    assert gen.pad_id == tiny_policy.tokenizer.pad_token_id != 0
    # without a budget: bfcl-eval's step limit, and the generator's own defaults (KV cache on)
    default = RolloutEngine(tiny_policy, get_format("qwen_xml"), context_length=4096, max_new_tokens=8, batch_size=1)
    params = inspect.signature(TransformersGenerator).parameters
    assert default.max_steps_per_turn == MAXIMUM_STEP_LIMIT and default.generator.kv_cache is True
    assert default.generator.memory_fraction == params["memory_fraction"].default
    # the oracle needs no model; anything else does
    with pytest.raises(UserError, match=r"^the rollout engine needs a model unless it plays the scripted oracle \(oracle=True\)$"):
        RolloutEngine(oracle_policy, get_format("qwen_xml"), context_length=4096, max_new_tokens=8, batch_size=1)
    # the model's own end-of-sequence ids stop a message too (here a made-up id 7)
    odd = Policy(model=SimpleNamespace(generation_config=SimpleNamespace(eos_token_id=[7])), tokenizer=oracle_policy.tokenizer,
                 device=None)
    eng = RolloutEngine(odd, get_format("qwen_xml"), context_length=4096, max_new_tokens=8, batch_size=1, oracle=True)
    assert (7,) in eng.stops and (7,) not in engine(oracle_policy, oracle=True).stops


class Mode:
    """A model stand-in that only knows whether it is in training mode."""

    def __init__(self, training):
        self.training = training

    def eval(self):
        self.training = False

    def train(self, mode=True):
        self.training = mode


@pytest.mark.parametrize("training", [True, False])
def test_play_generates_in_eval_mode_and_restores_the_models_mode(oracle_policy, bench, training):
    fmt = get_format("qwen_xml")
    probe = RolloutEngine(oracle_policy, fmt, context_length=16384, max_new_tokens=8, batch_size=2, oracle=True)
    echo = Echo(probe._encode("Done.") + probe.eot_ids, delay=0.0)
    echo.model = Mode(training)
    eng = RolloutEngine(oracle_policy, fmt, context_length=16384, max_new_tokens=8, batch_size=2, generator=echo)
    eng.play([bench["multi_turn_base_1"]], temperature=1.0)
    assert echo.modes and not any(echo.modes)
    assert echo.model.training is training


def test_a_tokenizer_that_adds_special_tokens_by_default_does_not_add_them_to_pieces(oracle_policy, bench):
    class WithBos:
        """SmolLM2's tokenizer, but adding a begin-of-text id (999) unless told not to, as Llama 3's does."""

        def __init__(self, inner):
            self.inner = inner

        def __call__(self, text, add_special_tokens=True):
            out = self.inner(text, add_special_tokens=False)
            return {"input_ids": ([999] if add_special_tokens else []) + list(out["input_ids"])}

        def __getattr__(self, name):
            return getattr(self.inner, name)

    from seal.policy.backbones import Policy

    policy = Policy(model=None, tokenizer=WithBos(oracle_policy.tokenizer), device=None)
    eng = Scripted(policy, "qwen_xml", ['<tool_call>{"name": "pwd", "arguments": {}}</tool_call>', "Done."])
    (r,) = eng.play([bench["multi_turn_base_0"]], temperature=0.0)
    assert 999 not in r.prompt_ids + r.completion_ids
    # long pieces (tool results, user turns over 256 characters) too
    assert 999 not in eng._encode("word " * 100)
    check_accounting(eng, r)


def test_decoding_keeps_the_text_exactly_as_tokenised(oracle_policy):
    import copy

    # a tokenizer set to clean up spaces before punctuation would turn "a , b ." into "a, b."
    tokenizer = copy.deepcopy(oracle_policy.tokenizer)
    tokenizer.clean_up_tokenization_spaces = True
    from seal.policy.backbones import Policy

    eng = engine(Policy(model=None, tokenizer=tokenizer, device=None), oracle=True)
    text = "a , b . <|im_end|>"
    assert eng._decode(eng._encode(text)) == text


def test_a_step_records_the_message_its_calls_and_what_failed_to_parse(oracle_policy, bench):
    good = '<tool_call>{"name": "pwd", "arguments": {}}</tool_call>'
    text = good + '\n<tool_call>{"name": "cd", "argu</tool_call>'
    eng = Scripted(oracle_policy, "qwen_xml", [text, "Done."])
    (r,) = eng.play([bench["multi_turn_base_0"]], temperature=0.0)
    step = r.episode.steps[0][0]
    # the message without its end marker; the good call ran, the broken one is recorded
    assert step.raw == text and [c.call.name for c in step.calls] == ["pwd"] and len(step.parse_failures) == 1
    # the environment answers the call: ChatML's newline after <|im_end|>, then the tool response
    env = r.transcript[2]
    assert not env.model and env.text.startswith("\n<|im_start|>user\n<tool_response>\n")


def test_a_cut_message_with_a_call_is_closed_before_the_tool_response(oracle_policy, bench):
    class Cut(Scripted):
        def _oracle_output(self, run):
            out = super()._oracle_output(run)
            if len(self.texts) == 1:  # the first step stops at the token budget: no end marker
                return Generated(out.ids[: -len(self.eot_ids)], out.logprobs[: -len(self.eot_ids)], None)
            return out

    eng = Cut(oracle_policy, "qwen_xml", ['<tool_call>{"name": "pwd", "arguments": {}}</tool_call>', "Done."])
    (r,) = eng.play([bench["multi_turn_base_0"]], temperature=0.0)
    assert r.episode.steps[0][0].calls
    assert r.transcript[2].text.startswith("<|im_end|>\n<|im_start|>user\n<tool_response>\n")
    check_accounting(eng, r)



def test_each_episode_times_its_own_execution_and_verification(oracle_policy, bench):
    import time

    class Slow(PlainView):
        """Every tool response takes 0.03 s to render."""

        def tool_response(self, record, visible):
            time.sleep(0.03)
            return super().tool_response(record, visible)

    entry = bench["multi_turn_base_3"]
    eng = engine(oracle_policy, oracle=True)
    t0 = time.perf_counter()
    (r,) = eng.play([entry], Slow(), temperature=0.0)
    wall = time.perf_counter() - t0
    calls = sum(len(step.calls) for turn in r.episode.steps for step in turn)
    assert calls == sum(len(g) for g in entry.gold) == 5
    # every step's execution counts, not only the last one's
    assert 0.03 * calls <= r.timings["execution"] <= wall
    assert 0.0 < r.timings["verification"] <= wall - r.timings["execution"]
    assert r.timings["generation"] == 0.0  # the oracle generates nothing
    assert list(r.timings) == ["generation", "execution", "verification"]


@pytest.mark.costly
def test_transcripts_of_the_transformers_backend_keep_every_generation_limit(tiny_policy, short_entries):
    """Real generation (tiny-random, sampled) under tight limits: no model message beyond max_new_tokens,
    none shorter without ending in a stop sequence, no turn beyond max_steps_per_turn, and no episode
    beyond the context window (a window just past the prompts, so some episodes run into it)."""
    limit, steps = 8, 2
    entries = short_entries[:4]
    probe = engine(tiny_policy, max_new_tokens=limit)
    context = max(probe.prompt_tokens(e) for e in entries) + 60
    eng = engine(tiny_policy, max_new_tokens=limit, max_steps_per_turn=steps, context_length=context, batch_size=4)
    rollouts = eng.play(entries, temperature=1.0, seeds=seeds(len(entries), 11))
    messages = [s.ids for r in rollouts for s in r.transcript if s.model]
    assert messages and max(map(len, messages)) <= limit
    assert any(len(m) == limit for m in messages)  # the cut-off is reached, so the bound is tested
    for m in messages:
        if len(m) < limit:
            assert any(tuple(m[-len(s):]) == s for s in eng.stops), m
    for r in rollouts:
        assert all(len(turn) <= steps for turn in r.episode.steps)
        assert len(r.prompt_ids) + len(r.completion_ids) <= context, (r.entry.id, r.ended)
    assert "context_overflow" in {r.ended for r in rollouts}

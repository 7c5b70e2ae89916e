"""The environment's two protocols (seal.env.protocol): BFCL's harness and the authors' release.

Every expected value is worked out from the release's code (the mirror of yihaohu0118/SEAL, paths below)."""

import pytest
from omegaconf import OmegaConf

from seal.env.benchmarks.bfcl_v3 import get_entries
from seal.env.calls import ToolCall
from seal.env.episode import Episode
from seal.env.protocol import BFCL, RELEASE, Protocol
from seal.errors import UserError
from seal.policy.formats import get_format
from seal.tasks.train import check_prompt_lengths

CD = ToolCall("cd", (), {"folder": "document"})


def opened(protocol, entry_id="multi_turn_miss_func_0", step_limit="turn", max_steps=20):
    (entry,) = get_entries([entry_id])
    episode = Episode(entry, max_steps, step_limit, protocol)
    episode.next_turn()
    return episode


def current_dir(episode):
    return episode.backends.instances["GorillaFileSystem"]._current_dir.name


def test_a_malformed_block_next_to_a_good_one_runs_nothing_under_the_release():
    # the output decoded one call (cd) and one block that did not parse
    failures = [('<tool_call>\n{"name": "ls"\n</tool_call>', "not valid JSON")]
    episode = opened(RELEASE)
    outcome = episode.step([CD], "raw", failures)
    # bfcl_env.py:1150-1180: a parse error empties tool_calls (nothing executes) and the model reads
    # "[ERROR] Invalid tool call format: " + the reasons joined by "; " (:339); no user message follows,
    # so the turn stays open; agent_flow.py:80-144 counts the output as one step
    assert outcome.error == "[ERROR] Invalid tool call format: not valid JSON"
    assert outcome.observations == [outcome.error] and outcome.records == []
    assert (outcome.turn_over, episode.in_turn, episode.model_steps) == (False, True, 1)
    assert current_dir(episode) == "workspace" and episode.result == [[]]
    assert episode.steps[0][0].error == outcome.error

    # BFCL's harness runs the call that decoded (result: turn -> step -> calls)
    episode = opened(BFCL)
    outcome = episode.step([CD], "raw", failures)
    assert outcome.error is None and current_dir(episode) == "document"
    assert episode.result == [[["cd(folder='document')"]]] and outcome.turn_over is False


def test_only_malformed_blocks_keep_the_turn_open_under_the_release_and_end_it_under_bfcl():
    failures = [("<tool_call>", "unterminated <tool_call> block (no </tool_call>)"), ("x", "no name")]
    episode = opened(RELEASE)
    outcome = episode.step([], "raw", failures)
    # bfcl_env.py:339 joins the reasons with "; "
    assert outcome.error == ("[ERROR] Invalid tool call format: unterminated <tool_call> block (no </tool_call>); "
                             "no name")
    assert outcome.turn_over is False and episode.in_turn
    episode = opened(BFCL)
    assert episode.step([], "raw", failures).turn_over is True and not episode.in_turn


def test_a_held_out_tool_before_its_delivery_is_refused_under_the_release():
    # multi_turn_miss_func_0 holds `sort` out until turn 3; at turn 0 it is not in the tool list
    sort = ToolCall("sort", (), {"file_name": "final_report.pdf"})
    episode = opened(RELEASE)
    outcome = episode.step([CD, sort], "raw")
    # env_handler.py:357-362 raises on the first unavailable name before anything runs; :192-197 wraps it
    # as "Invalid tool call format: <message>" and :453 prefixes "[ERROR] "; the turn stays open
    assert outcome.error == "[ERROR] Invalid tool call format: Tool 'sort' is not available in the current tool list."
    assert current_dir(episode) == "workspace" and outcome.turn_over is False and episode.result == [[]]
    # BFCL executes any method of the involved classes
    episode = opened(BFCL)
    outcome = episode.step([CD, sort], "raw")
    assert outcome.error is None and [r.text for r in outcome.records] == ["cd(folder='document')",
                                                                          "sort(file_name='final_report.pdf')"]


def test_a_refusal_counts_towards_the_episode_step_limit():
    episode = opened(RELEASE, step_limit="episode", max_steps=2)
    assert episode.step([], "a", [("x", "bad")]).ended is None
    outcome = episode.step([], "b", [("x", "bad")])
    # the second output of two reaches the limit with the turn open: force-quit, as a call step would be
    assert (outcome.ended, outcome.turn_over, episode.model_steps) == ("force_terminated", True, 2)


def test_a_refusal_counts_as_one_step_of_its_turn_under_bfcls_per_turn_limit():
    # a refused output is a step of its turn, as a step with calls is (the release counts it as one output,
    # agent_flow.py:80-144): with at most 2 steps a turn, a call step and a refusal are 2 (the turn goes on),
    # a second refusal is the 3rd (force-quit)
    episode = opened(RELEASE, step_limit="turn", max_steps=2)
    assert episode.step([CD], "a").turn_over is False
    assert episode.step([], "b", [("x", "bad")]).ended is None
    outcome = episode.step([], "c", [("x", "bad")])
    assert (outcome.ended, outcome.turn_over) == ("force_terminated", True)


def test_the_release_ends_tool_responses_with_a_newline():
    fmt = get_format("qwen_xml", "chatml")
    # bfcl_env.py:900 writes "<tool_response>\n{content}\n</tool_response>", :966 joins with "\n" and adds
    # one; Qwen's template wraps the user message as <|im_start|>user\n{content}<|im_end|>\n
    assert fmt.tool_results(["A", "B"], newline=True) == (
        "<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response>\n<|im_end|>\n"
        "<|im_start|>assistant\n")
    # Qwen2.5's own template (BFCL's): every block after a "\n", nothing before <|im_end|>
    assert fmt.tool_results(["A", "B"]) == (
        "<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
    assert fmt.error_message("[ERROR] x") == "<|im_start|>user\n[ERROR] x<|im_end|>\n<|im_start|>assistant\n"


def test_the_release_clips_an_observation_over_4096_tokens():
    # one token per character here: 5000 tokens > 4096, so cmt_base.py:207-212 keeps
    # int(5000 * (4096 - 100) / 5000) = 3996 characters and appends "... truncate ..."
    text = "x" * 5000
    assert RELEASE.clip(text, len) == "x" * 3996 + "... truncate ..."
    # at the limit nothing changes (the release clips only when n_token > limit)
    assert RELEASE.clip("y" * 4096, len) == "y" * 4096
    # two characters per token: 10000 characters are 5000 tokens, so int(10000 * 3996 / 5000) = 7992 stay
    assert RELEASE.clip("z" * 10000, lambda t: len(t) // 2) == "z" * 7992 + "... truncate ..."
    assert BFCL.clip(text, len) == text


def test_the_release_decides_a_full_context_from_the_unclipped_conversation_at_the_limit():
    # exp/SEAL.yaml:50-51: max_model_len 16384, response_length 4096, so cmt_linear.py:48 makes the limit
    # 12288 and :123 is safe only below it, counted over the raw messages (:122, mod="raw")
    assert RELEASE.context_full(length=5000, raw_length=12288, max_new_tokens=4096, context_length=16384)
    assert not RELEASE.context_full(length=5000, raw_length=12287, max_new_tokens=4096, context_length=16384)
    # seal's own rule (bfcl): what the model reads, and only past the window
    assert not BFCL.context_full(length=12288, raw_length=10**6, max_new_tokens=4096, context_length=16384)
    assert BFCL.context_full(length=12289, raw_length=12289, max_new_tokens=4096, context_length=16384)


def test_an_over_long_train_prompt_stops_a_release_run_and_is_skipped_under_bfcl():
    # trajectory.py:90-95 raises when the prompt exceeds data.max_prompt_length (8192, exp/SEAL.yaml:20)
    assert RELEASE.prompt_fits(8192) and not RELEASE.prompt_fits(8193) and BFCL.prompt_fits(10**6)
    with pytest.raises(UserError, match="protocol.over_long_prompt=skip"):
        check_prompt_lengths(RELEASE, ["a", "b"], ["b"])
    check_prompt_lengths(RELEASE, ["a"], ["b"])  # the long one was not chosen
    check_prompt_lengths(BFCL, ["a", "b"], ["b"])


def test_the_config_files_are_the_protocols():
    for name, expected in (("bfcl", BFCL), ("release", RELEASE)):
        assert Protocol.from_config(OmegaConf.load(f"conf/protocol/{name}.yaml")) == expected
    with pytest.raises(UserError, match="choose skip or error"):
        Protocol.from_config({"over_long_prompt": "drop"})


@pytest.mark.parametrize("node, sentence", [
    ({"name": "official"}, "protocol='official': choose bfcl (the official harness) or release (the authors')"),
    ({"over_long_prompt": "drop"}, "protocol.over_long_prompt='drop': choose skip or error"),
    ({"max_observation_tokens": 100}, "protocol.max_observation_tokens=100: give a number of tokens above 100, or null"),
    ({"max_prompt_tokens": 50}, "protocol.max_prompt_tokens=50: give a number of tokens above 100, or null"),
    ({"strict_parse": True}, "protocol.strict_parse=true reads tool names as the release did, unchecked: "
                             "set protocol.refuse_unavailable_tools=true with it"),
])
def test_a_bad_protocol_value_is_one_sentence_naming_the_key_and_its_fix(node, sentence):
    with pytest.raises(UserError) as caught:
        Protocol.from_config(node)
    assert str(caught.value) == sentence


def test_unset_keys_keep_bfcls_values_and_limits_just_over_the_margin_are_taken():
    assert Protocol.from_config({}) == BFCL and Protocol.from_config({"name": "release"}).name == "release"
    assert Protocol.from_config({"max_observation_tokens": 101, "max_prompt_tokens": 101}).max_prompt_tokens == 101
    assert Protocol.from_config({"over_long_prompt": "error"}).over_long_prompt == "error"


def test_a_protocol_describes_every_setting_for_the_reports():
    assert RELEASE.describe() == {
        "name": "release", "strict_parse": True, "refuse_unavailable_tools": True, "tool_response_newline": True,
        "max_observation_tokens": 4096, "raw_context_limit": True, "max_prompt_tokens": 8192,
        "over_long_prompt": "error", "shuffle_minibatches": False}


def test_minibatches_keep_their_order_only_when_asked():
    from trl.trainer import grpo_trainer

    from seal.rl.trainer import minibatch_order

    shuffle = grpo_trainer.shuffle_sequence_dict
    batch = {"x": list(range(5))}
    with minibatch_order(None):
        assert grpo_trainer.shuffle_sequence_dict(batch) is batch
    assert grpo_trainer.shuffle_sequence_dict is shuffle


def test_a_rounds_shuffle_is_drawn_from_its_own_seed_and_leaves_the_process_rng_alone():
    """TRL's shuffle (torch.randperm on the global RNG) drawn from minibatch_seed(seed, step, rank): what an
    unbroken and a resumed run draw at the same round, whatever the global RNG's state; the state is kept."""
    import torch
    from trl.trainer import grpo_trainer

    from seal.rl.trainer import minibatch_order, minibatch_seed

    batch = {"x": list(range(16))}
    seed = minibatch_seed(0, 4, 1)
    torch.manual_seed(seed)
    expected = [int(i) for i in torch.randperm(16)]  # TRL's permutation under that seed, by hand
    draws = []
    for state in (1, 2):
        torch.manual_seed(state)
        before = torch.get_rng_state()
        with minibatch_order(seed):
            draws.append(grpo_trainer.shuffle_sequence_dict(batch)["x"])
        assert torch.equal(torch.get_rng_state(), before)
    assert draws[0] == draws[1] == expected and sorted(expected) == list(range(16))
    # the seed is blake2b of "seed:step:rank", little-endian, top bit dropped; another step or rank draws anew
    import hashlib

    assert seed == int.from_bytes(hashlib.blake2b(b"0:4:1", digest_size=8).digest(), "little") // 2
    assert len({minibatch_seed(0, 4, 1), minibatch_seed(0, 5, 1), minibatch_seed(0, 4, 0), minibatch_seed(1, 4, 1)}) == 4


# ---------------------------------------------------------------------------------------- the release's parser
# Each expected answer below is what the release's own functions answered the same output: its strict
# xml_json parser (env_service/environments/bfcl/bfcl_env.py:216-341 on the release's main: docs' Sources), the
# error text bfcl_env.py:1150-1180 makes of its reasons, and env_handler.py:167-198 + :334-383 (the name
# checks), run in a scratch folder with the tool list VISIBLE. ("run", calls): the calls execute, as the
# release's decoded strings; ("refused", text): nothing runs and the model reads text; ("text", None): a
# reply, the turn ends.
T, E = "<tool_call>", "</tool_call>"
CD_BLOCK = '{"name": "cd", "arguments": {"folder": "document"}}'
LS_BLOCK = '{"name": "ls", "arguments": {}}'
VISIBLE = frozenset({"cd", "ls", "mkdir", "echo"})
REFUSED = "[ERROR] Invalid tool call format: "
NOT_SHOWN = "is not available in the current tool list."
TAG_TEXT = "Found tool_call tag text, but no valid <tool_call>{...}</tool_call> block."
BOTH_KEYS = "Tool call JSON must contain both 'name' and 'arguments'."
RELEASE_CASES = [
    # :254-255 the block pattern, with or without whitespace, text around it ignored (:325-327 only cleans it)
    ("one_block", f"{T}\n{CD_BLOCK}\n{E}", ("run", ["cd(folder='document')"])),
    ("two_blocks", f"{T}\n{CD_BLOCK}\n{E}\n{T}\n{LS_BLOCK}\n{E}", ("run", ["cd(folder='document')", "ls()"])),
    ("no_whitespace", f"{T}{CD_BLOCK}{E}", ("run", ["cd(folder='document')"])),
    ("text_around", f"Let me look.\n{T}\n{CD_BLOCK}\n{E}\nThen I answer.", ("run", ["cd(folder='document')"])),
    ("nested_object", f'{T}\n{{"name": "mkdir", "arguments": {{"dir_name": "x", "meta": {{"a": {{"b": 1}}}}}}}}\n{E}',
     ("run", ["mkdir(dir_name='x', meta={'a': {'b': 1}})"])),
    ("duplicate_keys", f'{T}\n{{"name": "cd", "name": "ls", "arguments": {{}}}}\n{E}', ("run", ["ls()"])),
    # :259-269 no block matched: a reply, unless tag text is there ("<tool_call" or "</tool_call>")
    ("plain_text", "The file is in the document folder.", ("text", None)),
    ("empty", "", ("text", None)),
    ("bare_json", CD_BLOCK, ("text", None)),
    ("stray_open_tag_prefix", "I will use <tool_call later.", ("refused", REFUSED + TAG_TEXT)),
    ("stray_close_tag", f"{CD_BLOCK}\n{E}", ("refused", REFUSED + TAG_TEXT)),
    ("only_unclosed", f"{T}\n{CD_BLOCK}", ("refused", REFUSED + TAG_TEXT)),
    ("json_list_block", f"{T}\n[{CD_BLOCK}, {LS_BLOCK}]\n{E}", ("refused", REFUSED + TAG_TEXT)),
    ("fenced", f"{T}\n```json\n{CD_BLOCK}\n```\n{E}", ("refused", REFUSED + TAG_TEXT)),
    ("whitespace_only_block", f"{T}\n\n{E}", ("refused", REFUSED + TAG_TEXT)),
    ("tag_with_attribute", f'<tool_call id="1">\n{CD_BLOCK}\n{E}', ("refused", REFUSED + TAG_TEXT)),
    # once a block matched, tag text elsewhere is never looked at: a list, fenced or unclosed block beside
    # a valid one is dropped silently and the valid one runs
    ("json_list_next_to_valid", f"{T}\n[{CD_BLOCK}]\n{E}\n{T}\n{LS_BLOCK}\n{E}", ("run", ["ls()"])),
    ("fenced_next_to_valid", f"{T}\n```json\n{CD_BLOCK}\n```\n{E}\n{T}\n{LS_BLOCK}\n{E}", ("run", ["ls()"])),
    ("trailing_unclosed_after_valid", f"{T}\n{CD_BLOCK}\n{E}\n{T}\n{LS_BLOCK}", ("run", ["cd(folder='document')"])),
    # :254's lazy object runs on to the first "}" before a closing tag: an unclosed block swallows the next
    ("unclosed_before_valid", f"{T}\n{CD_BLOCK}\n{T}\n{LS_BLOCK}\n{E}",
     ("refused", REFUSED + "Invalid tool call JSON: Extra data: line 2 column 1 (char 52)")),
    ("brace_in_string", f'{T}\n{{"name": "echo", "arguments": {{"content": "a}} </tool_call> b"}}}}\n{E}',
     ("refused", REFUSED + "Invalid tool call JSON: Unterminated string starting at: line 1 column 43 (char 42)")),
    # :314-321 JSON errors, in json's own words (flag_python_literals is off: no hint)
    ("bad_json", f'{T}\n{{"name": "cd", "arguments": {{folder: 1}}}}\n{E}',
     ("refused", REFUSED + "Invalid tool call JSON: Expecting property name enclosed in double quotes: line 1 column 30 (char 29)")),
    ("python_literals", f'{T}\n{{"name": "cd", "arguments": {{"folder": None}}}}\n{E}',
     ("refused", REFUSED + "Invalid tool call JSON: Expecting value: line 1 column 40 (char 39)")),
    ("extra_data", f"{T}\n{CD_BLOCK} {LS_BLOCK}\n{E}",
     ("refused", REFUSED + "Invalid tool call JSON: Extra data: line 1 column 53 (char 52)")),
    # :284-286 both keys or nothing ("parameters" does not stand in: accept_parameters_as_arguments is off)
    ("missing_arguments", f'{T}\n{{"name": "ls"}}\n{E}', ("refused", REFUSED + BOTH_KEYS)),
    ("parameters_instead", f'{T}\n{{"name": "cd", "parameters": {{"folder": "document"}}}}\n{E}', ("refused", REFUSED + BOTH_KEYS)),
    ("missing_name", f'{T}\n{{"arguments": {{}}}}\n{E}', ("refused", REFUSED + BOTH_KEYS)),
    # :291-303 arguments: a JSON string is decoded, then it must be an object
    ("string_arguments", f'{T}\n{{"name": "cd", "arguments": "{{\\"folder\\": \\"document\\"}}"}}\n{E}',
     ("run", ["cd(folder='document')"])),
    ("string_arguments_not_json", f'{T}\n{{"name": "cd", "arguments": "folder=document"}}\n{E}',
     ("refused", REFUSED + "Tool 'cd' has non-JSON string arguments.")),
    ("string_arguments_not_object", f'{T}\n{{"name": "cd", "arguments": "[1, 2]"}}\n{E}',
     ("refused", REFUSED + "Tool 'cd' arguments must be a JSON object.")),
    ("arguments_list", f'{T}\n{{"name": "cd", "arguments": [1, 2]}}\n{E}', ("refused", REFUSED + "Tool 'cd' arguments must be a JSON object.")),
    ("arguments_null", f'{T}\n{{"name": "ls", "arguments": null}}\n{E}', ("refused", REFUSED + "Tool 'ls' arguments must be a JSON object.")),
    # :339 several blocks' reasons joined with "; " in block order; one bad block refuses the good ones too
    ("three_errors", f'{T}\n{{"name": "ls"}}\n{E}\n{T}\n{{"name": "cd", "arguments": [1]}}\n{E}\n{T}\n{{"name": "cd" "arguments": {{}}}}\n{E}',
     ("refused", REFUSED + BOTH_KEYS + "; Tool 'cd' arguments must be a JSON object.; "
      "Invalid tool call JSON: Expecting ',' delimiter: line 1 column 15 (char 14)")),
    ("errors_and_valid", f'{T}\n{CD_BLOCK}\n{E}\n{T}\n{{"name": "cd", "arguments": "x"}}\n{E}\n{T}\n{LS_BLOCK}\n{E}',
     ("refused", REFUSED + "Tool 'cd' has non-JSON string arguments.")),
    # env_handler.py:351-362 names, call by call: empty ones (""/null/0) are missing, others not shown;
    # a list or object name fails the set lookup and :193-197 reports that error
    ("qualified_name", f'{T}\n{{"name": "GorillaFileSystem.cd", "arguments": {{"folder": "document"}}}}\n{E}',
     ("refused", REFUSED + f"Tool 'GorillaFileSystem.cd' {NOT_SHOWN}")),
    ("empty_name", f'{T}\n{{"name": "", "arguments": {{}}}}\n{E}', ("refused", REFUSED + "Missing function name in tool call.")),
    ("null_name", f'{T}\n{{"name": null, "arguments": {{}}}}\n{E}', ("refused", REFUSED + "Missing function name in tool call.")),
    ("zero_name", f'{T}\n{{"name": 0, "arguments": {{}}}}\n{E}', ("refused", REFUSED + "Missing function name in tool call.")),
    ("number_name", f'{T}\n{{"name": 5, "arguments": {{}}}}\n{E}', ("refused", REFUSED + f"Tool '5' {NOT_SHOWN}")),
    ("true_name", f'{T}\n{{"name": true, "arguments": {{}}}}\n{E}', ("refused", REFUSED + f"Tool 'True' {NOT_SHOWN}")),
    ("list_name", f'{T}\n{{"name": ["cd"], "arguments": {{}}}}\n{E}', ("refused", REFUSED + "unhashable type: 'list'")),
    ("object_name", f'{T}\n{{"name": {{"a": 1}}, "arguments": {{}}}}\n{E}', ("refused", REFUSED + "unhashable type: 'dict'")),
    ("unavailable", f'{T}\n{{"name": "sort", "arguments": {{"file_name": "a.txt"}}}}\n{E}', ("refused", REFUSED + f"Tool 'sort' {NOT_SHOWN}")),
    ("valid_then_unavailable", f'{T}\n{CD_BLOCK}\n{E}\n{T}\n{{"name": "sort", "arguments": {{}}}}\n{E}',
     ("refused", REFUSED + f"Tool 'sort' {NOT_SHOWN}")),
    # the first bad name in call order decides the text
    ("unavailable_then_empty_name", f'{T}\n{{"name": "sort", "arguments": {{}}}}\n{E}\n{T}\n{{"name": "", "arguments": {{}}}}\n{E}',
     ("refused", REFUSED + f"Tool 'sort' {NOT_SHOWN}")),
    ("empty_name_then_unavailable", f'{T}\n{{"name": "", "arguments": {{}}}}\n{E}\n{T}\n{{"name": "sort", "arguments": {{}}}}\n{E}',
     ("refused", REFUSED + "Missing function name in tool call.")),
    # bfcl_env.py:1150 before :1191: a parse error wins over an unavailable tool, even one in an earlier block
    ("malformed_and_unavailable", f'{T}\n{{"name": "sort", "arguments": {{}}}}\n{E}\n{T}\n{{"name": "cd", "arguments": {{folder}}}}\n{E}',
     ("refused", REFUSED + "Invalid tool call JSON: Expecting property name enclosed in double quotes: line 1 column 30 (char 29)")),
    # the parser passes any argument name and JSON value on: the release built the call text (:380-381)
    ("nan_value", f'{T}\n{{"name": "cd", "arguments": {{"folder": NaN}}}}\n{E}', ("run", ["cd(folder=nan)"])),
    ("space_in_argument_name", f'{T}\n{{"name": "cd", "arguments": {{"folder name": "x"}}}}\n{E}', ("run", ["cd(folder name='x')"])),
]


def release_reads(text, visible=VISIBLE):
    """What seal's release protocol answers one qwen_xml output: the same three outcomes as the table."""
    parsed = get_format("qwen_xml").parse_for(text, RELEASE.strict_parse)
    refusal = RELEASE.refusal(parsed.calls, parsed.failures, visible)
    if refusal is not None:
        return "refused", refusal
    if parsed.calls:
        return "run", [call.to_string() for call in parsed.calls]
    return "text", None


@pytest.mark.parametrize("text, expected", [case[1:] for case in RELEASE_CASES], ids=[case[0] for case in RELEASE_CASES])
def test_the_release_protocol_reads_outputs_as_the_releases_own_parser(text, expected):
    assert release_reads(text) == expected


def test_json_nested_past_pythons_limit_is_refused_with_the_json_prefix():
    # the release's step fails there (its parser catches json's decode errors only, bfcl_env.py:314); seal
    # refuses the output under the JSON error's prefix instead of ending the episode
    kind, text = release_reads(f'{T}{{"name": "cd", "arguments": {{"folder": {"[" * 100_000}}}}}{E}')
    assert kind == "refused" and text.startswith(REFUSED + "Invalid tool call JSON: maximum recursion depth exceeded")


def test_bfcl_keeps_the_lenient_parser_and_other_formats_their_own():
    qwen = get_format("qwen_xml")
    for label in ("missing_arguments", "parameters_instead", "json_list_block", "trailing_unclosed_after_valid"):
        text = dict((c[0], c[1]) for c in RELEASE_CASES)[label]
        assert qwen.parse_for(text, BFCL.strict_parse) == qwen.parse(text)
    # under BFCL a block without arguments runs with none, "parameters" stands in, a list runs its items
    assert qwen.parse_for(f'{T}\n{{"name": "ls"}}\n{E}', False).calls == [ToolCall("ls", (), {})]
    assert qwen.parse_for(f"{T}\n[{CD_BLOCK}, {LS_BLOCK}]\n{E}", False).calls == [CD, ToolCall("ls", (), {})]
    # the release read <tool_call> blocks only: formats without them keep their own parser under it
    for name, text in (("llama3_json", '{"name": "cd", "parameters": {"folder": "document"}}'),
                       ("bfcl_python", "[cd(folder='document')]")):
        fmt = get_format(name)
        assert fmt.parse_for(text, True) == fmt.parse(text) and fmt.parse(text).calls == [CD]


def test_strict_parsing_needs_the_tool_list_check():
    node = OmegaConf.load("conf/protocol/release.yaml")
    node.refuse_unavailable_tools = False
    with pytest.raises(UserError, match="set protocol.refuse_unavailable_tools=true"):
        Protocol.from_config(node)

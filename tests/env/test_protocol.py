"""The environment's two protocols (seal.env.protocol): BFCL's harness and the authors' release.

Every expected value is worked out from the release's code (the mirror of yihaohu0118/SEAL, paths below)."""

import pytest
from omegaconf import OmegaConf

from seal.env.benchmark import get_entries
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


def test_minibatches_keep_their_order_only_when_asked():
    from trl.trainer import grpo_trainer

    from seal.rl.trainer import minibatches_in_order

    shuffle = grpo_trainer.shuffle_sequence_dict
    batch = {"x": list(range(5))}
    with minibatches_in_order():
        assert grpo_trainer.shuffle_sequence_dict(batch) is batch
    assert grpo_trainer.shuffle_sequence_dict is shuffle

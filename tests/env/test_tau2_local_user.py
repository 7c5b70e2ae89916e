"""tau2's user simulator loaded in-process (benchmark.user.backbone, seal.policy.simulated_user.LocalUser): the backbone is
named by its conf/backbone file, sees the conversation as its own chat template renders it, answers greedily,
and its tool calls (telecom: the user's phone) are decoded by its tool format and run in the task's environment."""

import json
from types import SimpleNamespace

import pytest
from hydra.utils import instantiate

from seal.env import Episode
from seal.env.benchmarks.tau2 import USER_SIMULATOR_FAILED, Tau2, Tau2Session
from seal.env.tau2_user import SimulatorError, user_turn, user_view
from seal.errors import UserError
from seal.policy.simulated_user import LocalUser
from tests.env.test_tau2 import oracle_engine
from tests.test_configs import compose_with


def configured(*overrides):
    return instantiate(compose_with("benchmark=tau2", *overrides).benchmark)


def session_of(domain, user):
    benchmark = Tau2(domains=[domain])
    benchmark.use_user(user)
    return Tau2Session(benchmark.entries(domain)[0])


def test_the_backbone_is_named_by_its_config_file_and_a_wrong_choice_is_one_sentence():
    benchmark = configured("benchmark.user.backbone=tiny-random")
    assert benchmark.user_factory.keywords["max_new_tokens"] == 512
    user = benchmark.user
    assert isinstance(user, LocalUser) and user.policy is None  # nothing is loaded until the run is prepared
    with pytest.raises(UserError) as err:
        configured("benchmark.user.backbone=qwen9-1t").prepare()
    assert str(err.value).startswith("benchmark.user.backbone=qwen9-1t: no such backbone; choose among ")
    assert "qwen2.5-7b" in str(err.value) and "tiny-random" in str(err.value)
    with pytest.raises(UserError) as err:
        configured("benchmark.user.backbone=tiny-random", "benchmark.user.url=http://127.0.0.1:9/v1").prepare()
    assert "choose one" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UserError) as err:
        configured("benchmark.user.backbone=tiny-random", "benchmark.user.max_new_tokens=0").prepare()
    assert str(err.value).startswith("benchmark.user.max_new_tokens=0: ")
    with pytest.raises(UserError) as err:
        configured("benchmark.user.backbone=oracle").prepare()
    assert str(err.value) == "benchmark.user.backbone=oracle is a script, not a language model: name a model"


def test_the_simulators_prompt_is_the_chat_templates_and_its_answer_the_greedy_continuation():
    import torch

    from seal.env.tau2_user import guidelines
    from seal.policy.simulated_user import user_simulator

    user = user_simulator(backbone="tiny-random", max_new_tokens=5)
    user.check()
    tokenizer, model = user.policy.tokenizer, user.policy.model  # tiny-random speaks through SmolLM2's tokenizer
    session = session_of("airline", user)
    messages, tools = user_view(session)
    text = user.prompt(messages, tools)
    assert text == tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=5, do_sample=False,
                         eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tokenizer.eos_token_id)
    assert user.generate(text) == tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    # with the user's tools (telecom) the system message is the format's tool block, without the agent's
    # persona, then tau2's guidelines for a user with tools and the scenario; the agent's greeting follows
    session = session_of("telecom", user)
    text = user.prompt(*user_view(session))
    assert text.startswith("<|im_start|>system\n# Tools\n\nYou may call one or more functions")
    assert text.endswith(f"{guidelines(True)}\n\n<scenario>\n{session.task.user_scenario}\n</scenario><|im_end|>\n"
                         "<|im_start|>user\nHi! How can I help you today?<|im_end|>\n<|im_start|>assistant\n")


def test_the_configured_endpoint_or_backbone_is_built_with_its_settings():
    from seal.env.tau2_user import OpenAIUser
    from seal.policy.simulated_user import user_simulator

    endpoint = configured("benchmark.user.url=http://127.0.0.1:9/v1/", "benchmark.user.timeout_s=7").user
    assert isinstance(endpoint, OpenAIUser)
    assert (endpoint.url, endpoint.model, endpoint.timeout_s, endpoint.key) == ("http://127.0.0.1:9/v1", "default", 7.0, None)
    local = user_simulator(backbone="tiny-random", max_new_tokens=9)
    assert (local.name, local.max_new_tokens, local.config.name) == ("tiny-random", 9, "tiny-random")


@pytest.mark.costly
def test_the_embedded_model_as_user_reads_its_chat_template_and_answers_greedily():
    import torch

    benchmark = configured("benchmark.user.backbone=smollm2-135m", "benchmark.user.max_new_tokens=24")
    benchmark.prepare()
    user = benchmark.user
    session = session_of("airline", user)  # airline: no user tools, so the template's own rendering applies
    messages, tools = user_view(session)
    assert tools == []
    tokenizer, model = user.policy.tokenizer, user.policy.model
    # SmolLM2's own chat template renders the same conversation to the same text
    expected = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert user.prompt(messages, tools) == expected
    ids = tokenizer(expected, add_special_tokens=False, return_tensors="pt")["input_ids"]
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, do_sample=False,
                         eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tokenizer.eos_token_id)
    greedy = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True, clean_up_tokenization_spaces=False)
    assert greedy.strip()  # a real answer, not an empty one
    assert user.respond(session) == {"content": greedy.strip()}


class Scripted(LocalUser):
    """A LocalUser whose model writes the given texts in turn (its parsing and rendering are the real ones)."""

    def __init__(self, texts):
        super().__init__("tiny-random")
        self.texts, self.prompts = list(texts), []

    def generate(self, text):
        self.prompts.append(text)
        return self.texts.pop(0)


def test_a_user_tool_call_in_the_backbones_format_runs_on_the_phone_and_the_answer_follows_it():
    from tau2.data_model.message import ToolCall as Tau2Call
    from tau2.domains.telecom.environment import get_environment

    user = Scripted(['<tool_call>\n{"name": "check_status_bar", "arguments": {}}\n</tool_call>', " It says 5G. "])
    user.check()
    session = session_of("telecom", user)
    assert user_turn(session) == "It says 5G."
    # the call ran as the user's, on the task's phone: the same answer as tau2's environment gives it directly
    env = get_environment()
    task = session.task
    env.set_state(initialization_data=task.initial_state.initialization_data,
                  initialization_actions=task.initial_state.initialization_actions, message_history=[])
    direct = env.get_response(Tau2Call(id="x", name="check_status_bar", arguments={}, requestor="user"))
    call, result, said = session.trajectory[-3:]
    assert [c.name for c in call.tool_calls] == ["check_status_bar"] and call.role == "user"
    assert result.content == direct.content and result.requestor == "user" and said.content == "It says 5G."
    # the second prompt shows the user's tools, its own call in the format's words and the phone's answer
    second = user.prompts[1]
    shown = [json.loads(line)["name"] for line in second.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()]
    assert shown == list(session.user_tools) and "check_status_bar" in shown
    assert second.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "check_status_bar", "arguments": {}}\n'
                           f"</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n{direct.content}\n"
                           "</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_a_positional_argument_in_a_python_style_format_is_named_from_the_user_tools_schema():
    from seal.policy.formats import get_format

    user = Scripted([])
    user.check()
    user.format = get_format("bfcl_python", chat="chatml", tools="release")
    session = session_of("telecom", user)
    _, tools = user_view(session)
    schema = next(t["function"] for t in tools if t["function"]["name"] == "set_network_mode_preference")
    first = list(schema["parameters"]["properties"])[0]
    reply = user.reply('[set_network_mode_preference("4g_5g_preferred")]', tools)
    call = reply["tool_calls"][0]["function"]
    assert call["name"] == "set_network_mode_preference" and json.loads(call["arguments"]) == {first: "4g_5g_preferred"}


def test_an_answer_is_openais_assistant_message_layout():
    user = Scripted([])
    user.check()
    tools = [{"type": "function", "function": {"name": "toggle_roaming", "description": "",
                                               "parameters": {"type": "object", "properties": {}}}}]
    assert user.reply("  Roaming is on now.\n", tools) == {"content": "Roaming is on now."}
    # two calls in qwen_xml, one to a tool the user does not have (user_turn refuses it by name)
    text = ('<tool_call>\n{"name": "toggle_roaming", "arguments": {}}\n</tool_call>\n'
            '<tool_call>\n{"name": "reboot", "arguments": {"hard": true}}\n</tool_call>')
    assert user.reply(text, tools) == {"content": "", "tool_calls": [
        {"id": "user_call_0", "type": "function", "function": {"name": "toggle_roaming", "arguments": "{}"}},
        {"id": "user_call_1", "type": "function", "function": {"name": "reboot", "arguments": '{"hard": true}'}}]}


def test_a_call_that_does_not_decode_or_a_conversation_too_long_is_an_unusable_answer():
    user = Scripted(['<tool_call>\n{"name": "check_status_bar", "arguments": \n</tool_call>'])
    user.check()
    with pytest.raises(SimulatorError) as err:
        user_turn(session_of("telecom", user))
    assert str(err.value).startswith("the user simulator wrote a tool call that does not decode (not valid JSON")
    long = LocalUser("tiny-random", max_new_tokens=16384)  # tiny-random's context is 16,384 tokens
    long.check()
    with pytest.raises(SimulatorError) as err:
        long.respond(session_of("airline", long))
    assert "outgrow tiny-random's context of 16384" in str(err.value)


@pytest.mark.costly
def test_whole_conversations_with_an_in_process_user_end_as_their_verdicts_say():
    benchmark = configured("benchmark.domains=[mock]", "benchmark.user.backbone=tiny-random",
                           "benchmark.user.max_new_tokens=8", "benchmark.max_user_turns=3")
    benchmark.prepare()
    asked = []
    generate = benchmark.user.generate
    benchmark.user.generate = lambda text: asked.append(text) or generate(text)
    rollouts = oracle_engine().play(benchmark.entries("mock")[:2], temperature=0.0)
    assert len(asked) == sum(r.episode.backends.user_turns for r in rollouts) >= 2
    for rollout in rollouts:
        failed = rollout.episode.backends.failure is not None
        assert (rollout.ended == "user_simulator_error") == failed
        assert (rollout.verdict.error_type == USER_SIMULATOR_FAILED) == failed


def test_the_simulators_tool_results_travel_together_and_the_conversation_goes_on_after_them():
    user = Scripted([])
    user.check()
    call = {"id": "u0", "type": "function", "function": {"name": "toggle_roaming", "arguments": '{"on": true}'}}
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "", "tool_calls": [call, call]},
                {"role": "tool", "tool_call_id": "u0", "content": "A"}, {"role": "tool", "tool_call_id": "u0", "content": "B"},
                {"role": "assistant", "content": "Roaming is on."}, {"role": "user", "content": "Good."}]
    # Qwen2.5's chat template by hand: the calls as <tool_call> blocks, consecutive results in one user message
    block = '<tool_call>\n{"name": "toggle_roaming", "arguments": {"on": true}}\n</tool_call>'
    assert user.prompt(messages, []) == (
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        f"<|im_start|>assistant\n{block}\n{block}<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\nRoaming is on.<|im_end|>\n<|im_start|>user\nGood.<|im_end|>\n<|im_start|>assistant\n")
    # in a Python-style format the same calls are written as Python calls by keyword
    from seal.policy.formats import get_format

    user.format = get_format("bfcl_python", chat="chatml", tools="release")
    assert "<|im_start|>assistant\n[toggle_roaming(on=True), toggle_roaming(on=True)]<|im_end|>\n" in user.prompt(messages, [])


def test_a_positional_argument_to_a_tool_the_user_lacks_is_dropped_and_the_call_left_to_user_turn():
    from seal.policy.formats import get_format

    user = Scripted([])
    user.check()
    user.format = get_format("bfcl_python", chat="chatml", tools="release")
    reply = user.reply('[reboot("hard")]', [])
    assert reply["tool_calls"][0]["function"] == {"name": "reboot", "arguments": "{}"}


def test_the_simulator_stops_at_the_end_of_its_message_or_of_the_text():
    user = Scripted([])
    user.check()
    vocab = user.policy.tokenizer.get_vocab()
    # ChatML's message end and the base model's end of text, as SmolLM2's tokenizer numbers them
    assert user.stop_ids == [vocab["<|im_end|>"], vocab["<|endoftext|>"]]


def test_the_simulators_defaults_are_the_configs():
    from seal.env.tau2_user import OpenAIUser
    from seal.policy.simulated_user import user_simulator
    from tests.test_configs import compose_with

    user = compose_with("benchmark=tau2").benchmark.user
    assert user_simulator(url="http://127.0.0.1:9/v1").timeout_s == float(user.timeout_s) == 120.0
    assert isinstance(user_simulator(url="http://127.0.0.1:9/v1"), OpenAIUser)
    assert user_simulator(backbone="tiny-random").max_new_tokens == user.max_new_tokens == 512
    assert LocalUser("tiny-random").max_new_tokens == 512
    assert LocalUser("tiny-random", max_new_tokens=1).max_new_tokens == 1  # one token is enough to answer


def test_an_endpoints_key_is_read_from_the_named_variable(monkeypatch):
    from seal.policy.simulated_user import user_simulator

    monkeypatch.setenv("SEAL_TEST_USER_KEY", "k3y")
    assert user_simulator(url="http://127.0.0.1:9/v1", api_key_env="SEAL_TEST_USER_KEY").key == "k3y"


def test_two_ways_named_at_once_are_named_in_the_sentence():
    from seal.io import CONF_DIR
    from seal.policy.simulated_user import user_simulator

    with pytest.raises(UserError) as err:
        user_simulator(url="http://h/v1", backbone="tiny-random")
    assert str(err.value) == ("benchmark.user: url=http://h/v1 and backbone=tiny-random are set; choose one (an "
                              "OpenAI-compatible endpoint, a backbone loaded in-process, or a script) and set the "
                              "others to null")
    with pytest.raises(UserError) as err:
        LocalUser("qwen9-1t")
    known = sorted(p.stem for p in (CONF_DIR / "backbone").glob("*.yaml"))
    assert str(err.value) == f"benchmark.user.backbone=qwen9-1t: no such backbone; choose among {', '.join(known)}"


class ContractModel:
    """What LocalUser.generate asks of a transformers model, for one sequence, by transformers' rules: an argument
    left None falls back to the model's generation_config, here a sampling one as Qwen2.5-Instruct ships it
    (do_sample true, no stop of the chat's); without a mask, one is inferred from the pad id when that is not a
    stop (generation/utils.py, _prepare_attention_mask_for_generation). Greedy decoding of the whole prompt
    continues with `greedy`; sampling, or a prompt partly masked out, with `other`. Decoding ends after the first
    stop id it emits (which the output keeps) or after max_new_tokens. Its weights live on `device`: ids elsewhere
    raise, as torch does."""

    def __init__(self, greedy, other, device="cpu"):
        import torch

        self.greedy, self.other, self.device = greedy, other, torch.device(device)
        self.generation_config = SimpleNamespace(do_sample=True, eos_token_id=None)

    def generate(self, ids, attention_mask=None, max_new_tokens=20, do_sample=None, eos_token_id=None, pad_token_id=None):
        import torch

        if ids.device != self.device:
            raise RuntimeError(f"Expected all tensors to be on the same device, but found {ids.device} and {self.device}")
        sample = self.generation_config.do_sample if do_sample is None else do_sample
        stops = self.generation_config.eos_token_id if eos_token_id is None else eos_token_id
        stops = [stops] if isinstance(stops, int) else list(stops or [])
        masked = False
        if attention_mask is None and pad_token_id is not None and pad_token_id not in stops:
            masked = bool(ids.eq(pad_token_id).any())
        out = []
        for token in self.other if sample or masked else self.greedy:
            if len(out) == max_new_tokens:
                break
            out.append(token)
            if token in stops:
                break
        # the prompt's positions are never read back (meta tensors hold no values)
        return torch.cat([torch.zeros(ids.shape, dtype=torch.long), torch.tensor([out], dtype=torch.long)], dim=1)


def test_the_answer_is_the_greedy_continuation_up_to_the_message_end_without_it():
    user = LocalUser("tiny-random", max_new_tokens=16)
    user.check()
    tokenizer = user.policy.tokenizer
    encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    # the model on an accelerator (torch's meta device stands in for one): the prompt's ids are moved there
    user.policy.model = ContractModel(encode("It says 5G.<|im_end|>Thanks"), encode("Maybe 4G?<|im_end|>"), "meta")
    user.policy.device = "meta"
    prompt = "<|im_start|>user\nWhat does the status bar say?<|im_end|>\n<|im_start|>assistant\n"
    assert user.generate(prompt) == "It says 5G."
    user.max_new_tokens = 2
    assert user.generate(prompt) == tokenizer.decode(encode("It says 5G.")[:2])


def test_the_conversation_and_the_answer_may_fill_the_context_exactly():
    user = LocalUser("tiny-random", max_new_tokens=4)
    user.check()
    tokenizer = user.policy.tokenizer
    user.policy.model = ContractModel(tokenizer("Yes.<|im_end|>", add_special_tokens=False)["input_ids"], [])
    prompt = "<|im_start|>user\nIs it on?<|im_end|>\n<|im_start|>assistant\n"
    n = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    # a tokenizer that puts its own begin token in front, as Llama 3's does: the prompt already opens with the
    # chat's, so none is added and the count is the prompt's own tokens
    import copy

    from tokenizers.processors import TemplateProcessing

    user.policy.tokenizer = tokenizer = copy.deepcopy(tokenizer)
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(single="<|im_start|> $A",
                                                                    special_tokens=[("<|im_start|>", 1)])
    assert len(tokenizer(prompt)["input_ids"]) == n + 1
    user.backbone = SimpleNamespace(context_length=n + 4)
    assert user.generate(prompt) == "Yes."
    user.backbone = SimpleNamespace(context_length=n + 3)
    with pytest.raises(SimulatorError, match=rf"^the conversation \({n} tokens\) and the user simulator's answer \(4\) "
                                             rf"outgrow tiny-random's context of {n + 3}$"):
        user.generate(prompt)


def test_the_simulator_speaks_its_tokenizers_chat_whatever_its_tool_format():
    # tiny-random's tokenizer is SmolLM2's (ChatML); llama3_json alone would be wrapped in Llama 3's chat
    user = LocalUser("tiny-random")
    user.config.tool_format = "llama3_json"
    user.check()
    assert user.format.name == "llama3_json" and user.format.chat.name == "chatml"
    assert user.prompt([{"role": "system", "content": "S"}], []).startswith("<|im_start|>system\nS<|im_end|>\n")

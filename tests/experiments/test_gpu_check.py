"""`python -m experiments.gpu_check`, the GPU preflight, on this CPU: tiny shapes, the real run.py."""

import json
import math
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from experiments import gpu_check
from experiments.measure.preflight import disk, model, node, runs, steps
from experiments.measure.preflight.steps import Failure
from seal.errors import UserError
from seal.policy.backbones import embedded_tokenizer
from seal.rl.checkpoint import latest_complete_checkpoint

REPO = Path(__file__).resolve().parents[2]
SHAPE_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size")
# the embedded SmolLM2 tokenizer's vocabulary (its GGUF's token list)
SMOLLM2_VOCAB = 49152


def published_arch(name):
    """The arch block of conf/backbone/<name>.yaml, read as plain YAML (not through the preflight's own code)."""
    return yaml.safe_load((REPO / "conf" / "backbone" / f"{name}.yaml").read_text())["arch"]


def preflight_cli(*args):
    return subprocess.run([sys.executable, "-m", "experiments.gpu_check", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=3600)


# -- the model ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["qwen2.5-3b", "llama-3.1-8b", "qwen3-4b"])
def test_the_published_shape_is_the_backbone_configs_vocabulary_included(tmp_path, name):
    bb = model.published_backbone(name, [])
    model.model_config(bb["arch"], embedded_tokenizer(), 16384, tiny=False).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    arch = published_arch(name)
    assert {k: saved[k] for k in SHAPE_KEYS} == {k: arch[k] for k in SHAPE_KEYS}
    if "head_dim" in arch:  # Qwen3-4B: 32 heads of 128 on a 2560-wide model, not 2560 / 32
        assert saved["head_dim"] == arch["head_dim"] == 128
    assert (saved["model_type"], saved["tie_word_embeddings"]) == (arch["model_type"], arch["tie_word_embeddings"])
    # the published vocabulary (the logits every step computes are the published model's), not the tokenizer's
    assert saved["vocab_size"] == arch["vocab_size"] != SMOLLM2_VOCAB
    assert saved["max_position_embeddings"] == 16384


def test_the_tiny_shape_scales_only_the_sizes_and_is_built_once(tmp_path):
    bb = model.published_backbone("qwen2.5-3b", [])
    first = model.build_model(bb["arch"], 16384, True, "bfloat16", str(tmp_path))
    again = model.build_model(bb["arch"], 16384, True, "bfloat16", str(tmp_path))
    assert first["built"] and not again["built"] and again["path"] == first["path"]
    saved = json.loads((Path(first["path"]) / "config.json").read_text())
    assert {k: saved[k] for k in SHAPE_KEYS} == {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                                                 "num_key_value_heads": 1, "intermediate_size": 256}
    # Qwen2.5-3B's published vocabulary, 151,936
    assert (saved["model_type"], saved["tie_word_embeddings"], saved["vocab_size"]) == ("qwen2", True, 151936)
    # by hand: tied embedding 151936 x 128; per layer q and o 128x128, k and v 128x64 (one kv head of 64),
    # Qwen2's q/k/v biases 128+64+64, the MLP 3 x 128x256, two norms of 128; the final norm
    per_layer = 2 * 128 * 128 + 2 * 128 * 64 + (128 + 64 + 64) + 3 * 128 * 256 + 2 * 128
    assert first["parameters"] == 151936 * 128 + 2 * per_layer + 128
    assert first["tokenizer_size"] == SMOLLM2_VOCAB
    assert (Path(first["path"]) / "tokenizer.json").is_file()


def test_a_tiny_qwen3_derives_its_head_size_from_the_tiny_width():
    config = model.model_config(published_arch("qwen3-4b"), embedded_tokenizer(), 16384, tiny=True)
    assert (config.model_type, config.hidden_size, config.num_attention_heads, config.head_dim) == ("qwen3", 128, 2, 64)


def test_the_embedding_note_names_the_published_vocabulary_and_what_the_tokenizer_covers():
    qwen = model.embedding_note(published_arch("qwen2.5-3b"), 151936, SMOLLM2_VOCAB, tiny=False)
    assert qwen == ("published qwen2 shape, vocabulary 151,936 as published (one tied matrix); the embedded SmolLM2 "
                    "tokenizer's ids cover its first 49,152 rows")
    llama = model.embedding_note(published_arch("llama-3.1-8b"), 128256, SMOLLM2_VOCAB, tiny=True)
    assert llama.startswith("tiny llama shape {'hidden_size': 128") and "128,256 as published (embedding and LM head)" in llama


@pytest.mark.slow
def test_a_model_built_for_qwen2_5_3b_has_its_published_shape_in_bf16(tmp_path):
    # about 2 min and 6 GiB of memory on a CPU
    from seal.policy.memory import param_count

    bb = model.published_backbone("qwen2.5-3b", [])
    built = model.build_model(bb["arch"], int(bb["context_length"]), False, bb["dtype"], str(tmp_path))
    folder = Path(built["path"])
    saved = json.loads((folder / "config.json").read_text())
    arch = published_arch("qwen2.5-3b")
    assert {k: saved[k] for k in SHAPE_KEYS} == {k: arch[k] for k in SHAPE_KEYS}
    assert saved["vocab_size"] == arch["vocab_size"] == 151936
    # torch's count of the built model against the architecture formula: the published 3.09B
    assert built["parameters"] == param_count(arch)
    dtypes = set()
    for shard in folder.glob("*.safetensors"):
        with shard.open("rb") as fh:  # a safetensors file opens with its header's length, then the JSON header
            header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        dtypes |= {v["dtype"] for k, v in header.items() if k != "__metadata__"}
    assert dtypes == {"BF16"}


# -- reading the runs' files -------------------------------------------------------------------------

HYDRA_ERROR = """Could not override 'budget.nonexistent'.
To append to your config use +budget.nonexistent=1
Key 'nonexistent' is not in struct
    full_key: budget.nonexistent
    object_type=dict

Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.
"""
TRACEBACK = """[1/1] round 0 | reward 0.000
Traceback (most recent call last):
  File "run.py", line 20, in main
RuntimeError: PytorchStreamWriter failed writing file data/12: file write failed
"""


def test_the_failure_reason_is_the_line_that_says_why():
    assert runs.failure_reason(HYDRA_ERROR) == "Could not override 'budget.nonexistent'."
    assert runs.failure_reason(TRACEBACK) == \
        "RuntimeError: PytorchStreamWriter failed writing file data/12: file write failed"
    assert runs.failure_reason("sanity check: ...\nerror: backbone.dtype='f8': choose one of float32\n") == \
        "backbone.dtype='f8': choose one of float32"


def sanity_json(folder, rewards, rose):
    k = 3
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sanity.json").write_text(json.dumps({
        "rewards": rewards, "rose": rose, "learning_rate": 1e-6, "min_rise": 0.15,
        "first_rounds_mean": sum(rewards[:k]) / k, "last_rounds_mean": sum(rewards[-k:]) / k}))


def test_a_flat_sanity_reward_fails_on_the_published_shape_only(tmp_path):
    log = tmp_path / "sanity.log"
    log.write_text("sanity: reward 0.250 -> 0.200 (did NOT rise; needed +0.15)\n")
    sanity_json(tmp_path / "run", [0.25, 0.25, 0.25, 0.2, 0.2, 0.2], rose=False)
    assert runs.check_sanity(1, tmp_path / "run", log, mechanics_only=True) == (
        "reward 0.25 -> 0.20 over 6 rounds at lr 1e-06 (did not rise: expected on a tiny shape, only the "
        "mechanics count)")
    with pytest.raises(Failure, match=r"^step sanity: the reward did not rise \(reward 0.25 -> 0.20 over 6 rounds "
                                      r"at lr 1e-06, \+0.15 needed\)"):
        runs.check_sanity(1, tmp_path / "run", log, mechanics_only=False)
    sanity_json(tmp_path / "run", [0.0, 0.0, 0.25, 1.0, 1.0, 0.75], rose=True)
    # (0 + 0 + 0.25) / 3 and (1 + 1 + 0.75) / 3
    verdict = runs.check_sanity(0, tmp_path / "run", log, mechanics_only=False)
    assert verdict == "reward 0.08 -> 0.92 over 6 rounds at lr 1e-06 (rose)"


def test_a_sanity_run_that_crashed_fails_with_its_reason(tmp_path):
    log = tmp_path / "sanity.log"
    log.write_text(TRACEBACK)
    # exit code 1 without sanity.json is a crash, not the task's "did not rise"
    with pytest.raises(Failure, match=r"^step sanity failed with exit code 1: RuntimeError: PytorchStreamWriter"):
        runs.check_sanity(1, tmp_path / "empty", log, mechanics_only=True)


def test_the_train_step_needs_what_the_paper_run_leaves(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("")
    run = tmp_path / "train"
    run.mkdir()
    plan = {"weights": 1.5, "total": 4.25}
    config = {"training_memory_gib": plan, "budget": {"ood_benchmarks": ["bfcl_v4_memory"]}}
    (run / "run_config.json").write_text(json.dumps(config))
    # SIGKILL (the OOM killer's) leaves no line in the log that says why
    with pytest.raises(Failure, match=r"^step train failed with exit code -9: killed by SIGKILL \(log: "):
        runs.check_train(-9, run, log)
    with pytest.raises(Failure, match=r"^step train exited 0 but wrote no metrics.json"):
        runs.check_train(0, run, log)
    metrics = {"rounds": 1, "planned_rounds": 2, "world_size": 2, "round_time_split": {}}
    (run / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(Failure, match=r"^step train exited 0 but wrote no best.json"):
        runs.check_train(0, run, log, 2)
    (run / "best.json").write_text(json.dumps({"round": 1, "entries": 4}))
    with pytest.raises(Failure, match=r"ran 1 of its 2 rounds"):
        runs.check_train(0, run, log, 2)
    metrics["rounds"] = 2
    (run / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(Failure, match=r"ran on 2 rank\(s\) instead of 4"):
        runs.check_train(0, run, log, 4)
    with pytest.raises(Failure, match=r"wrote no ood_before"):
        runs.check_train(0, run, log, 2)
    metrics |= {"ood_before": {"bfcl_v4_memory": {}}, "ood_after": {"bfcl_v4_memory": {}}, "test_final": {"x": 0},
                "test_best_on_val": {"x": 0},
                "round_time_split": {"generation": 4.2, "optimisation": 35.0, "diagnosis": 0.01}}
    (run / "metrics.json").write_text(json.dumps(metrics))
    with pytest.raises(Failure, match=r"kept no best model"):
        runs.check_train(0, run, log, 2)
    (run / "best_model").mkdir()
    (run / "best_model" / "config.json").write_text("{}")
    assert runs.check_train(0, run, log, 2) == (
        plan, "2 rounds on 2 rank(s) (per round: generation 4 s, optimisation 35 s); best model of round 1 on 4 "
              "validation entries; bfcl_v4_memory before and after")
    # a run given no out-of-domain benchmark (-- budget.ood_benchmarks=[], docs/development.md's borrowed GPU
    # machine) writes none, and is not failed for it
    (run / "run_config.json").write_text(json.dumps(config | {"budget": {"ood_benchmarks": []}}))
    (run / "metrics.json").write_text(json.dumps(metrics | {"ood_before": None, "ood_after": None}))
    assert runs.check_train(0, run, log, 2)[1].endswith(
        "best model of round 1 on 4 validation entries; no out-of-domain benchmark (budget.ood_benchmarks=[])")
    (run / "metrics.json").write_text(json.dumps(metrics | {"test_final": None}))
    with pytest.raises(Failure, match=r"wrote no test_final"):
        runs.check_train(0, run, log, 2)


# step 1: r = ln 2 and 0 on two trained tokens (a third masked out); step 2: r = -0.5 on one
HAND_STEPS = (([[-1.1, -2.3, -0.9]], [[math.log(2), 0.0, 5.0]], [[1, 1, 0]]), ([[-0.7]], [[-0.5]], [[1]]))


def logprob_run(folder, logged_kl, ref_dtype=None, logps_dtype=None, reference=True, steps=HAND_STEPS):
    """A train run of one round of two optimizer steps (one micro-batch each) whose saved log-probs give, by hand,
    k3 = exp(r) - r - 1 of r = ln 2 and 0 on step 1's two trained tokens and of r = -0.5 on step 2's one."""
    import torch

    folder.mkdir()
    (folder / "metrics.jsonl").write_text(json.dumps({"round": 0, "train/kl": logged_kl}) + "\n")
    (folder / "logprobs").mkdir()
    for step, (logps, shift, mask) in enumerate(steps, start=1):
        logps = torch.tensor(logps)
        ref = logps + torch.tensor(shift)
        record = {"logps": logps.to(logps_dtype or torch.float32), "old_logps": logps.clone(),
                  "ref_logps": ref.to(ref_dtype).float() if ref_dtype else ref, "mask": torch.tensor(mask)}
        if not reference:  # trainer.beta=0: TRL scores no reference
            del record["ref_logps"]
        torch.save(record, folder / "logprobs" / f"step{step:05d}_rank0_000.pt")
    return folder


# step 1: ((2 - ln 2 - 1) + 0) / 2 tokens; step 2: e^-0.5 + 0.5 - 1; the round: the mean of its two steps
HAND_KL = ((1 - math.log(2)) / 2 + (math.exp(-0.5) - 0.5)) / 2


def test_the_train_steps_log_probs_are_float32_and_give_its_logged_kl(tmp_path):
    import torch

    log = tmp_path / "train.log"
    assert HAND_KL == pytest.approx(0.1299785, abs=1e-7)
    good = runs.check_logprobs("train", logprob_run(tmp_path / "good", HAND_KL), log, [HAND_KL])
    assert good["recomputed_kl_fp64"] == pytest.approx([HAND_KL], rel=1e-6) and good["train_kl"] == [HAND_KL]
    assert (good["files"], good["tokens"], good["tokens_with_zero_kl"]) == (2, 3, 1)
    # a logged KL off by 1e-4 relative, log-probs rounded to bf16 before the loss, or a bf16 tensor: each fails
    with pytest.raises(Failure, match="logged train/kl .* is not the KL of its saved log-probs"):
        runs.check_logprobs("train", logprob_run(tmp_path / "off", HAND_KL), log, [HAND_KL * (1 + 1e-4)])
    with pytest.raises(Failure, match="ref_logps holds bf16 values only"):
        runs.check_logprobs("train", logprob_run(tmp_path / "rounded", HAND_KL, ref_dtype=torch.bfloat16), log,
                           [HAND_KL])
    with pytest.raises(Failure, match="logps reached the loss as torch.bfloat16"):
        runs.check_logprobs("train", logprob_run(tmp_path / "bf16", HAND_KL, logps_dtype=torch.bfloat16), log,
                           [HAND_KL])
    (tmp_path / "none").mkdir()
    with pytest.raises(Failure, match="step sanity saved no log-probs"):
        runs.check_logprobs("sanity", tmp_path / "none", log, [0.0])
    # two rounds logged for two optimizer steps: one step a round, whose KLs are not the one-round mean
    with pytest.raises(Failure, match=r"over 2 optimizer steps, \[0\.15.*, 0\.10.*\] recomputed"):
        runs.check_logprobs("train", tmp_path / "good", log, [HAND_KL, HAND_KL])
    # without a KL term (trainer.beta=0) the dtypes are checked and there is no KL to recompute, unless one was logged
    no_kl = runs.check_logprobs("train", logprob_run(tmp_path / "beta0", None, reference=False), log, [None])
    assert (no_kl["train_kl"], no_kl["recomputed_kl_fp64"], no_kl["tokens"]) == (None, None, 3)
    assert node.logprobs_note(no_kl) == "log-probs reached the loss in float32 (3 tokens); no KL term (trainer.beta=0)"
    assert node.logprobs_note(good) == ("log-probs reached the loss in float32 (3 tokens, 1 with a KL of exactly 0); "
                                        "train/kl per round 0.13 = its float64 recomputation")
    with pytest.raises(Failure, match="2 of its 2 saved micro-batches hold no reference log-probs"):
        runs.check_logprobs("train", tmp_path / "beta0", log, [HAND_KL])
    # the release's bounds: a policy far above its reference (r = -15: exp(-15) + 15 - 1 = 14.0000003) counts 10
    far = (([[-0.7]], [[-15.0]], [[1]]),)
    assert runs.check_logprobs("train", logprob_run(tmp_path / "far", 10.0, steps=far), log, [10.0])["recomputed_kl_fp64"] \
        == pytest.approx([10.0], rel=1e-12)
    with pytest.raises(Failure, match="is not the KL of its saved log-probs"):
        runs.check_logprobs("train", tmp_path / "far", log, [math.exp(-15) + 14])
    # nothing logged, or steps that do not split into the rounds logged: said as such
    with pytest.raises(Failure, match="logged no train/kl for any round"):
        runs.check_logprobs("train", tmp_path / "good", log, [])
    with pytest.raises(Failure, match="logged no train/kl for a round"):
        runs.check_logprobs("train", tmp_path / "good", log, [None])
    three = (*HAND_STEPS, ([[-0.7]], [[-0.5]], [[1]]))
    with pytest.raises(Failure, match="saved over 3 optimizer steps, which do not split into the 2 rounds it logged"):
        runs.check_logprobs("train", logprob_run(tmp_path / "three", HAND_KL, steps=three), log, [HAND_KL, HAND_KL])
    # what each run logged: the train run's metrics.jsonl, the sanity run's history
    assert runs.logged_kl("train", tmp_path / "good") == [HAND_KL]
    (tmp_path / "none" / "sanity.json").write_text(json.dumps({"history": [{"train/kl": 0.0}, {"train/kl": 2e-7}]}))
    assert runs.logged_kl("sanity", tmp_path / "none") == [0.0, 2e-7]


def test_a_checkpoint_counts_once_complete_with_every_round_in_its_shardings_layout(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"planned_rounds": 2}))
    folder = tmp_path / "checkpoints" / "checkpoint-4"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(Failure, match=r"^step checkpoint: no complete checkpoint"):
        runs.check_checkpoint(tmp_path)
    (folder / "seal_state.json").write_text(json.dumps({"history": [{"round": 0}]}))
    with pytest.raises(Failure, match=r"records 1 rounds instead of 2"):
        runs.check_checkpoint(tmp_path)
    (folder / "seal_state.json").write_text(json.dumps({"history": [{"round": 0}, {"round": 1}]}))
    assert runs.check_checkpoint(tmp_path) == folder
    # fsdp2: accelerate's sharded folder, not a safetensors file
    with pytest.raises(Failure, match=r"holds no sharded model \(pytorch_model_fsdp_0/\)"):
        runs.check_checkpoint(tmp_path, "fsdp2")
    (folder / "pytorch_model_fsdp_0").mkdir()
    assert runs.check_checkpoint(tmp_path, "fsdp2") == folder
    (folder / "model.safetensors").unlink()
    with pytest.raises(Failure, match=r"holds no model weights"):
        runs.check_checkpoint(tmp_path)


def test_several_processes_are_an_accelerate_launch_of_the_wrapped_run(tmp_path):
    args = ["task=train", "launch.sharding=fsdp2"]
    one = runs.run_command(args, runs.Launch(), tmp_path / "train", gpus=0, dtype="bfloat16")
    assert one[:2] == [sys.executable, "-c"] and one[3:] == [str(REPO / "run.py"), *args, f"hydra.run.dir={tmp_path / 'train'}"]
    two = runs.run_command(args, runs.Launch(2, "fsdp2"), tmp_path / "train", gpus=0, dtype="bfloat16")
    at = two.index("--module")
    # accelerate's launcher with the sharding's config and 2 processes, each running run.py under the wrapper
    assert two[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert two[two.index("--config_file") + 1] == str(REPO / "experiments" / "cluster" / "accelerate" / "fsdp2.yaml")
    assert two[two.index("--num_processes") + 1] == "2"
    # the precision a GPU node runs the paper backbones in, on the CPU's gloo ranks too
    assert two[two.index("--mixed_precision") + 1] == "bf16"
    assert two[at:at + 4] == ["--module", "experiments.gpu_check", "--child", str(REPO / "run.py")]
    assert two[at + 4:] == [*args, "launch.processes=null", f"hydra.run.dir={tmp_path / 'train'}"]
    # FSDP2 on one process is a launch of one rank (it needs the launch's process group), not a plain process
    single = runs.run_command(args, runs.Launch(1, "fsdp2"), tmp_path / "train", gpus=1, dtype="bfloat16")
    assert single[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert single[single.index("--num_processes") + 1] == "1"


@pytest.mark.parametrize("gpus, processes, env, visible", [
    (4, 1, {}, "0"),            # the README's one-GPU preflight on a 4-GPU node: one GPU, said so
    (4, 2, {}, "0,1"),
    (4, 4, {}, None),           # the paper's node: every GPU
    (1, 1, {}, None),
    (0, 2, {}, None),           # gloo ranks on the CPU
    (1, 1, {"CUDA_VISIBLE_DEVICES": "3"}, None),  # the user's own choice of one GPU stands
    # a SLURM job's allocation lists all its GPUs: the runs take the first of that list, in CUDA's order
    (4, 1, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, "0"),
    (4, 2, {"CUDA_VISIBLE_DEVICES": "4, 5,6,7"}, "4,5"),
    (2, 1, {"CUDA_VISIBLE_DEVICES": "GPU-8f2e,GPU-11aa"}, "GPU-8f2e"),
    (4, 4, {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, None),
])
def test_the_runs_see_as_many_gpus_as_they_have_processes(gpus, processes, env, visible):
    assert runs.visible_gpus(gpus, processes, env) == visible


def test_the_disk_need_of_the_paper_node_is_its_checkpoints_and_models_by_hand():
    """Qwen2.5-7B at paper_miniature on 4 processes: a checkpoint after every round with one kept (two on disk
    while the second is written), each 12 bytes per parameter (fp32 masters and AdamW's two moments; every
    rank's share lands on this node's disk); final_model and best_model and the built model in bf16."""
    from seal.policy.memory import param_count

    arch = published_arch("qwen2.5-7b")
    n = param_count(arch)
    plan = disk.disk_plan("qwen2.5-7b", model.published_backbone("qwen2.5-7b", []), False, [], 4)
    assert (plan.checkpoint, plan.checkpoints, plan.model, plan.models, plan.built) == (12 * n, 2, 2 * n, 2, 2 * n)
    # the figures: about 2 x 85 + 2 x 14 GiB, and a model more
    assert round(plan.checkpoint / 2**30) == 85 and round(plan.model / 2**30) == 14
    # in one run each of the 4 ranks loads the built model twice, its policy and its reference (TRL reads the reference
    # from the model's path), and its vLLM engine loads it a third time
    assert plan.loaded == 4 * 2 * (2 * n)
    with_vllm = disk.disk_plan("qwen2.5-7b", model.published_backbone("qwen2.5-7b", []), False, [], 4, vllm=True)
    assert with_vllm.loaded == 4 * 3 * (2 * n) and with_vllm.total == plan.total
    # a model an earlier preflight built is on the disk already: it is not asked for again, nor moved
    reused = disk.disk_plan("qwen2.5-7b", model.published_backbone("qwen2.5-7b", []), False, [], 4, reused=True)
    assert reused.total == plan.total - 2 * n and reused.describe().endswith("the built model reused)")
    # the timeout grows with the bytes the run moves: 10 min and 5 min per GiB/s... by hand
    moved = (plan.total + plan.loaded) / 2**30
    assert plan.step_timeout() == pytest.approx(600 + moved / 0.2)
    assert plan.step_timeout(engine_starts=1) == pytest.approx(1200 + moved / 0.2)
    assert plan.step_timeout() > 3 * 600
    # without CUDA the runs are CPU-bound: 30 min, the miniature's train run on two gloo ranks having taken 10.6
    assert plan.step_timeout(cuda=False) == pytest.approx(1800 + moved / 0.2)
    assert plan.step_timeout(engine_starts=1, cuda=False) == pytest.approx(3600 + moved / 0.2)


def test_a_disk_too_small_is_refused_before_anything_is_built(tmp_path, monkeypatch, capsys):
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: usage(10 * 2**30, 0, 2**30))
    monkeypatch.setattr(node, "build_in_a_child", lambda *a: pytest.fail("built despite the refusal"))
    out = tmp_path / "out"
    assert gpu_check.main(["--backbone", "qwen2.5-7b", "--processes", "4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    # without CUDA the tiny shape (its 151,936-row embedding dominates): 1.1 GiB do not fit 1.0
    assert err.startswith("error: the runs write up to 1.1 GiB (2 checkpoint(s) of 0.4 GiB at once, 2 model(s) of ")
    assert err.endswith("; 1.0 GiB free there: free space, or choose a larger disk with --out, before the preflight "
                        "starts") and "\n" not in err
    # the same preflight again, its model of this shape already built there by an earlier one, on a disk with room
    # for all but half that model: its bytes are not asked for again, and the run fits
    bb = model.published_backbone("qwen2.5-7b", [])
    whole = disk.disk_plan("qwen2.5-7b", bb, True, [], 4)
    monkeypatch.setattr(disk.shutil, "disk_usage", lambda path: usage(10 * 2**30, 0, whole.total - whole.built // 2))
    model.model_folder(bb["arch"], int(bb["context_length"]), True, bb["dtype"], str(out / "models"))[0].mkdir(parents=True)

    class Built(Exception):
        pass

    monkeypatch.setattr(node, "build_in_a_child", lambda *a: (_ for _ in ()).throw(Built()))
    with pytest.raises(Built):
        gpu_check.main(["--backbone", "qwen2.5-7b", "--processes", "4", "--out", str(out)])
    said = capsys.readouterr().out
    assert f"gpu_check: disk: the runs write up to {(whole.total - whole.built) / 2**30:.1f} GiB (" in said
    assert f"the built model reused) under {out}; " in said


def test_a_node_of_four_processes_plays_a_round_that_splits_over_them():
    from seal.budget import Budget
    from tests.test_configs import compose_with

    for processes in (1, 2, 4, 8):
        cfg = compose_with("backbone=tiny-random", *steps.train_overrides(processes, [])[1:])
        budget = Budget.from_config(cfg.budget, processes)  # refuses a round that does not split
        assert budget.rounds_for(budget.train_entries) == 2
    # the user's own sizes stand
    assert steps.train_overrides(4, ["budget.prompts_per_round=8"]) == [
        *steps.TRAIN, "budget.train_entries=8"]


def test_the_steps_peak_is_the_largest_ranks(tmp_path):
    (tmp_path / "train.peak.json.rank0").write_text(json.dumps({"max_rss_gib": 3.0}))
    (tmp_path / "train.peak.json.rank1").write_text(json.dumps({"max_rss_gib": 5.0}))
    peak = runs._largest_peak(tmp_path, "train")
    assert peak["max_rss_gib"] == 5.0 and len(peak["ranks"]) == 2
    assert runs._largest_peak(tmp_path, "sanity") == {}


def test_out_is_claimed_and_only_its_step_folders_are_cleared(tmp_path):
    (tmp_path / "theirs.txt").write_text("")
    with pytest.raises(UserError, match="holds files this preflight did not write"):
        node.prepare_out(tmp_path)
    out = tmp_path / "out"
    node.prepare_out(out)
    for name in ("sanity", "train", "logs", "models"):
        (out / name).mkdir()
        (out / name / "f").write_text("")
    # the earlier preflight's report goes too: a preflight stopped before its own leaves none to be misread
    (out / "gpu_check.json").write_text("{}")
    node.prepare_out(out)
    assert sorted(p.name for p in out.iterdir()) == [".gpu_check", "models"]


def test_more_processes_than_the_nodes_gpus_are_refused_before_the_model_is_built(tmp_path, monkeypatch, capsys):
    # the paper's node preflight on a node that shows 2 GPUs: refused before the 7B model (about 14 GiB, minutes)
    # is built or anything written; as many processes as GPUs, or none (gloo ranks on the CPU) pass this check
    monkeypatch.setattr(node, "cuda_devices", lambda: 2)
    monkeypatch.setattr(node, "build_in_a_child", lambda *a: pytest.fail("built despite the refusal"))
    out = tmp_path / "out"
    assert gpu_check.main(["--backbone", "qwen2.5-7b", "--processes", "4", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: --processes 4 but this node shows 2 GPU(s) (CUDA_VISIBLE_DEVICES included): give "
                   "--processes 2 or less, or run on a node with 4 GPUs")
    assert not out.exists()
    for gpus, processes in ((2, 2), (4, 1), (0, 2)):
        node.check_launch(runs.Launch(processes=processes), [], gpus)


@pytest.mark.parametrize("args, message", [
    (["--backbone", "tiny-random"], "--backbone tiny-random: choose a backbone with a published architecture"),
    (["--processes", "0"], "--processes 0: give a number of processes"),
    (["--", "launch.sharding=ddp"], "the preflight sets launch.sharding=ddp itself"),
    (["--", "task=eval"], "the preflight sets task=eval itself"),
    (["--", "backbone.dtype=float8"], "backbone.dtype"),
    # each step's run.py would refuse it: the preflight does before it builds anything
    (["--", "+budget.round=3"], "+budget.round adds budget.round, which no config of seal has and nothing reads (the "
                                "closest one is budget.rounds)"),
])
def test_bad_input_is_one_sentence_and_exit_code_2(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    assert gpu_check.main(["--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]
    # refused before anything is written
    assert not out.exists()


# -- the preflight through run.py --------------------------------------------------------------------

def test_an_override_that_does_not_apply_is_refused_before_any_step(tmp_path):
    proc = preflight_cli("--out", str(tmp_path / "out"), "--", "budget.nonexistent=1")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: the overrides budget.nonexistent=1 do not apply to backbone "
                                                "qwen2.5-3b: Could not override 'budget.nonexistent'."]
    assert not (tmp_path / "out").exists()


def test_a_failing_step_stops_the_preflight_naming_the_step(tmp_path):
    # a value the config takes and the run refuses
    proc = preflight_cli("--out", str(tmp_path / "out"), "--", "trainer.loss_type=dr_grpo")
    assert proc.returncode == 1
    log = tmp_path / "out" / "logs" / "sanity.log"
    assert proc.stderr.strip().splitlines()[-1] == ("gpu_check failed: step sanity failed with exit code 2: "
                                                    "trainer.loss_type='dr_grpo': choose one of grpo, bnpo "
                                                    f"(log: {log})")
    assert not (tmp_path / "out" / "train").exists()


# the default timeout (10 min a run for the tiny shape) is a GPU node's; these tests check the steps, on a CPU
# that other processes may share
LOADED = ["--step-timeout", "2400"]
# the smallest runs that still pass through every step: two sanity rounds of 2 x 2, four new tokens
SMALL = ["sanity.rounds=2", "sanity.prompts_per_round=2", "sanity.rollouts_per_prompt=2", "budget.max_new_tokens=4"]


@pytest.mark.slow
def test_the_tiny_preflight_runs_end_to_end_and_reports_the_runs_own_figures(tmp_path):
    # two preflights of about 3 min each on the 2-core CPU: the first keeps its checkpoint, the second reuses
    # the model, starts its runs afresh and removes the checkpoint afterwards
    out = tmp_path / "out"
    proc = preflight_cli("--out", str(out), "--keep", *LOADED, "--", *SMALL)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "gpu_check.json").read_text())
    # Qwen2.5-3B's published vocabulary
    assert (summary["tiny"], summary["cuda"], summary["vocab_size"]) == (True, False, 151936)
    assert [s["name"] for s in summary["steps"]] == ["build", "sanity", "train", "checkpoint", "throughput"]
    assert summary["steps"][4]["note"].startswith("64 episodes on cpu: ")
    assert f"step throughput: {summary['steps'][4]['note']}" in proc.stdout
    # the plan printed and returned is run_config.json's
    plan = json.loads((out / "train" / "run_config.json").read_text())["training_memory_gib"]
    assert summary["plan_gib"] == plan and summary["steps"][2]["plan_gib"] == plan["total"]
    assert f"training_memory_gib): total {plan['total']:g} GiB" in proc.stdout
    train_line = next(line for line in proc.stdout.splitlines() if line.startswith("train "))
    assert f" {plan['total']:.2f}  2 rounds on 1 rank(s) (" in train_line
    # the sanity figures are sanity.json's
    sanity = json.loads((out / "sanity" / "sanity.json").read_text())
    assert len(sanity["rewards"]) == 2 and sanity["learning_rate"] == 1e-6
    assert f"reward {sanity['first_rounds_mean']:.2f} -> {sanity['last_rounds_mean']:.2f} over 2 rounds" in \
        summary["steps"][1]["note"]
    # both runs saved their log-probs and were checked: sanity's 2 rounds of one step, each step's 2 x 2 replies
    # one micro-batch (sanity.micro_batch_size 4), its logged KL the one sanity.json holds
    assert summary["logprobs"]["sanity"]["files"] == 2 == len(list((out / "sanity" / "logprobs").glob("*.pt")))
    assert summary["logprobs"]["sanity"]["train_kl"] == [h["train/kl"] for h in sanity["history"]]
    assert summary["logprobs"]["train"]["files"] == len(list((out / "train" / "logprobs").glob("*.pt"))) > 0
    assert "log-probs reached the loss in float32" in summary["steps"][2]["note"]
    # the checkpoint is the train run's last complete one, with its round in seal_state.json
    checkpoint = latest_complete_checkpoint(out / "train" / "checkpoints")
    assert summary["checkpoint"] == str(checkpoint)
    assert len(json.loads((checkpoint / "seal_state.json").read_text())["history"]) == 2
    assert any(checkpoint.glob("*.safetensors"))
    assert summary["checkpoint_gib"] == sum(f.stat().st_size for f in checkpoint.rglob("*") if f.is_file()) / 2**30
    # each run recorded its own peak at exit (a process that imported torch holds well over 0.2 GiB)
    for step in summary["steps"][1:3]:
        assert step["peak"] == json.loads((out / "logs" / f"{step['name']}.peak.json").read_text())
        assert step["peak"]["max_rss_gib"] > 0.2 and "cuda_max_allocated_gib" not in step["peak"]

    again = preflight_cli("--out", str(out), *LOADED, "--", *SMALL)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    second = json.loads((out / "gpu_check.json").read_text())
    assert second["model"]["path"] == summary["model"]["path"] and not second["model"]["built"]
    assert "resuming from" not in (out / "train" / "run.log").read_text()
    assert not (out / "train" / "checkpoints").exists() and not (out / "train" / "final_model").exists()
    # task=sanity writes no checkpoint (TRL may leave the empty folder)
    assert not list((out / "sanity" / "checkpoints").glob("checkpoint-*")) and (out / "train" / "run_config.json").is_file()


@pytest.mark.slow
def test_two_gloo_ranks_run_the_preflights_steps_with_fsdp2(tmp_path):
    # about 12 min on the 2-core CPU (in bf16, the GPU node's launch precision): sanity and the paper arm's miniature on
    # two gloo ranks started by accelerate
    out = tmp_path / "out"
    proc = preflight_cli("--out", str(out), "--processes", "2", *LOADED, "--", "sanity.rounds=3")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "gpu_check.json").read_text())
    assert summary["launch"] == {"processes": 2, "sharding": "fsdp2", "engine": "transformers"}
    run_config = json.loads((out / "train" / "run_config.json").read_text())
    assert (run_config["world_size"], run_config["sharding"], run_config["budget"]["name"]) == (2, "fsdp2", "paper_miniature")
    # the GPU node's precision: Qwen2.5-3B's bf16, FSDP2 gathering bf16 and reducing in fp32
    assert run_config["precision"]["mixed_precision"] == "bf16"
    assert run_config["precision"]["fsdp2"] == {"param_dtype": "bfloat16", "reduce_dtype": "float32",
                                                "output_dtype": None}
    # each rank recorded its own peak; the step shows the largest
    train = summary["steps"][2]
    assert len(train["peak"]["ranks"]) == 2
    assert train["peak"]["max_rss_gib"] == max(r["max_rss_gib"] for r in train["peak"]["ranks"])
    assert "sharded model and optimizer" in summary["steps"][3]["note"]
    assert "2 rounds on 2 rank(s)" in train["note"]


@pytest.mark.parametrize("processes, environment, seen", [(1, None, "0"), (2, None, "0,1"), (1, "2", "2"), (4, None, None)])
def test_each_run_sees_only_the_gpus_its_launch_takes(tmp_path, monkeypatch, processes, environment, seen):
    """On a node of 4 GPUs a run of 1 or 2 processes is started with CUDA_VISIBLE_DEVICES naming the first 1 or 2
    (a single training process that sees several GPUs is refused: seal.rl.sharding.check_devices); a choice
    already in the environment is left as it is, and a launch of every GPU needs none."""
    from types import SimpleNamespace

    started = []
    monkeypatch.setattr(runs, "cuda_devices", lambda: 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if environment is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", environment)
    monkeypatch.setattr(runs.subprocess, "run", lambda command, env, **kw: started.append(env) or SimpleNamespace(
        returncode=0))
    runs.run_step("sanity", ["task=sanity"], tmp_path, 10.0, runs.Launch(processes, "ddp"), "bfloat16")
    (env,) = started
    assert env.get("CUDA_VISIBLE_DEVICES") == (seen if seen is not None else environment)


def test_without_step_timeout_each_run_may_take_what_its_models_disk_traffic_and_engine_starts_need(tmp_path, monkeypatch,
                                                                                                    capsys):
    """preflight's default step timeout is the disk plan's (DiskPlan.step_timeout), not a fixed 600 s: on the CPU
    30 min for a run, as much again for the vLLM engine's start, and the disk traffic at 0.2 GiB/s."""
    timeouts = []

    class Started(Exception):
        pass

    def run_step(name, overrides, out, timeout, *args, **kwargs):
        timeouts.append(timeout)
        raise Started

    monkeypatch.setattr(node, "build_step", lambda bb, tiny, out: ({"path": str(out), "parameters": 10**9}, None))
    monkeypatch.setattr(node, "run_step", run_step)
    for engine in ("transformers", "vllm"):
        with pytest.raises(Started):
            node.preflight("qwen2.5-7b", tmp_path / engine, launch=node.Launch(1, "ddp", engine))
    bb = node.published_backbone("qwen2.5-7b", [])
    # the vLLM engine loads the model once more on each rank
    moved = [(plan.total + plan.loaded) / 2**30 / 0.2
             for plan in (node.disk_plan("qwen2.5-7b", bb, True, [], 1, vllm=vllm) for vllm in (False, True))]
    assert moved[1] > moved[0]
    assert timeouts == [pytest.approx(1800 + moved[0]), pytest.approx(3600 + moved[1])]
    said = [line for line in capsys.readouterr().out.splitlines() if "each run may take" in line]
    assert [line.rsplit("each run may take ", 1)[1] for line in said] == [
        f"{(1800 + moved[0]) / 60:.0f} min (--step-timeout)", f"{(3600 + moved[1]) / 60:.0f} min (--step-timeout)"]

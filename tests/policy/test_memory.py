"""The per-rank memory plan (seal.policy.memory), term by term, worked out by hand from the published configs
(Qwen2.5-3B: hidden 2048, 36 layers, 16 heads / 2 KV heads of 128, MLP 11008, vocabulary 151936, tied head;
Qwen2.5-7B: hidden 3584, 28 layers, 28 / 4 heads of 128, MLP 18944, vocabulary 152064, untied), and the
facts of TRL, transformers and torch each term rests on. tests/policy/test_memory_measured.py measures the
terms on small models on the CPU."""

import re
from pathlib import Path

import pytest
from hydra.utils import instantiate

from seal.errors import UserError
from seal.policy.memory import GiB, kv_bytes_per_token, layer_param_count, param_count, training_memory
from tests.config_values import backbone_cfg

ROOT = Path(__file__).resolve().parents[2]
CTX = 16384
# Qwen2.5-3B's decoder layer: q (with bias), k and v (2 KV heads x 128, with biases), o, the MLP's three, two norms
LAYER_3B = 2048 * 2048 + 2048 + 2 * (2048 * 256 + 256) + 2048 * 2048 + 3 * 2048 * 11008 + 2 * 2048
N_3B = 36 * LAYER_3B + 151936 * 2048 + 2048  # tied embedding, final norm
LAYER_7B = 3584 * 3584 + 3584 + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584
N_7B = 28 * LAYER_7B + 2 * 152064 * 3584 + 3584  # untied head
# an 80 GB GPU less the CUDA context and the allocator's reserve (experiments/measure/memory.py)
USABLE = 80 * 10**9 - 2 * GiB


def arch(name):
    return backbone_cfg(name).arch


def plan(name, **kwargs):
    return training_memory(arch(name), compute_dtype="bfloat16", episode_tokens=CTX, **kwargs)


def test_the_parameter_counts_by_hand():
    assert param_count(arch("qwen2.5-3b")) == N_3B == 3_085_938_688
    assert layer_param_count(arch("qwen2.5-3b")) == LAYER_3B
    assert param_count(arch("qwen2.5-7b")) == N_7B and layer_param_count(arch("qwen2.5-7b")) == LAYER_7B
    # 36 layers x 2 KV heads x 128 dims x (k, v) x 2 bytes
    assert kv_bytes_per_token(arch("qwen2.5-3b"), "bfloat16") == 36864


def test_the_resident_state_per_sharding():
    ddp = plan("qwen2.5-3b")
    # fp32 masters, two fp32 AdamW moments, fp32 gradients, a bf16 reference
    assert (ddp.weights, ddp.optimizer, ddp.gradients, ddp.reference) == (4 * N_3B, 8 * N_3B, 4 * N_3B, 2 * N_3B)
    # the measured 35 GB checkpoints hold the masters and AdamW: 12 bytes per parameter
    assert 34 < (ddp.weights + ddp.optimizer) / GiB < 35
    assert plan("qwen2.5-3b", reference=False).reference == 0  # beta 0: TRL builds no reference
    fsdp = plan("qwen2.5-7b", sharding="fsdp2", ranks=4)
    # divided over four ranks; the reference sits in host memory (seal.rl.sharding.shard_reference)
    assert (fsdp.weights, fsdp.optimizer, fsdp.gradients) == (N_7B, N_7B // 4 * 8, N_7B // 4 * 4)
    assert fsdp.reference == 0


def test_ddp_buckets_are_a_second_copy_of_the_gradients_on_more_than_one_rank():
    # torch's DDP: buckets as large as the gradients, kept all run; gradient_as_bucket_view=False (accelerate's
    # and torch's default) keeps param.grad apart from them
    assert plan("qwen2.5-3b", ranks=4).ddp_buckets == 4 * N_3B
    assert plan("qwen2.5-3b", ranks=4).resident == (4 + 8 + 2 + 4) * N_3B
    # one process is not wrapped in DDP; FSDP2 reduce-scatters without buckets
    assert plan("qwen2.5-3b").ddp_buckets == 0 and plan("qwen2.5-3b", sharding="fsdp2", ranks=4).ddp_buckets == 0
    # LoRA: only the fp32 adapters have gradients
    assert plan("qwen2.5-3b", ranks=2, lora_params=1000).ddp_buckets == 4 * 1000


def test_fsdp2_with_the_transformers_engine_keeps_its_rollout_copy_all_run():
    hf = plan("qwen2.5-7b", sharding="fsdp2", ranks=4)
    # seal.rl.sharding.RolloutCopy: an unsharded bf16 copy built at the first play and kept
    assert hf.rollout_copy == 2 * N_7B and hf.rollout_weights == 0
    assert hf.resident == N_7B + N_7B // 4 * 8 + 2 * N_7B
    assert hf.total == hf.resident + max(hf.training, hf.rollout)
    # with vLLM the engine holds the weights, the copy is never built
    vllm = plan("qwen2.5-7b", sharding="fsdp2", ranks=4, rollout_engine_bytes=10 * GiB)
    assert vllm.rollout_copy == 0 and vllm.rollout_weights == 10 * GiB


def test_the_fused_lm_head_holds_tiles_not_the_logits():
    ddp = plan("qwen2.5-3b")
    # the final norm's fp32 input and fp32 normalized output, the scored hidden states saved (fp32 stream),
    # a 4096 x 32768 bf16 tile, a 32768-row slice of the fp32 head cast to bf16, a 4096-token bf16 hidden tile
    tiles = 4096 * 32768 * 2 + 32768 * 2048 * 2 + 4096 * 2048 * 2
    assert ddp.lm_head == CTX * 2048 * (4 + 4) + CTX * 2048 * 4 + tiles
    # the backward: the fp32 gradient of the hidden states and of the whole (tied) head, already fp32
    assert ddp.lm_head_grads == CTX * 2048 * 4 + 151936 * 2048 * 4
    fsdp = plan("qwen2.5-7b", sharding="fsdp2", ranks=4)
    # bf16 stream and gathered bf16 head: no casts on the way in; both gradients cast back to bf16, and FSDP2's
    # reduction of the head's gradient: its fp32 reduce-scatter input replaces the freed fp32 gradient, and the
    # fp32 output shard (a quarter of the head on 4 ranks) comes on top
    assert fsdp.lm_head == CTX * 3584 * (4 + 2) + CTX * 3584 * 2 + 4096 * 32768 * 2
    assert fsdp.lm_head_grads == CTX * 3584 * (4 + 2) + 152064 * 3584 * (4 + 2) + 152064 * 3584 * 4 // 4
    # LoRA: the head is frozen, only the hidden states' gradient
    assert plan("qwen2.5-3b", lora_params=1000).lm_head_grads == CTX * 2048 * (4 + 2)


def test_checkpointed_activations_and_the_recomputed_layer_by_hand():
    ddp = plan("qwen2.5-3b")
    # every layer's fp32 input, the rotary cos/sin (128 each, fp32)
    assert ddp.activations == CTX * (36 * 2048 * 4 + 2 * 128 * 4)
    # one layer recomputed under autocast over an fp32 stream: the second norm's fp32 input (the residual sum),
    # both norms' fp32 normalized outputs, five bf16 casts (q, k, v, gate, up inputs), SDPA's q and output
    # (16 heads x 128), k and v (2 x 128) in bf16 and a fp32 log-sum-exp per head, the MLP's four 11008-wide
    # bf16 tensors; then its backward's two MLP-wide bf16 gradients and the fp32 gradient of the stream
    saved = 4 * 2048 + 2 * 4 * 2048 + 5 * 2 * 2048 + (2 * 2048 * 2 + 2 * 256 * 2 + 4 * 16) + 4 * 11008 * 2
    assert ddp.recomputed_layer == CTX * (saved + 2 * 11008 * 2 + 4 * 2048)
    fsdp = plan("qwen2.5-7b", sharding="fsdp2", ranks=4)
    # bf16 stream: each norm saves an fp32 upcast and a bf16 normalized output, the two norm outputs are shared
    saved = 2 * 4 * 3584 + 2 * 2 * 3584 + 2 * 2 * 3584 + (2 * 3584 * 2 + 2 * 512 * 2 + 4 * 28) + 4 * 18944 * 2
    assert fsdp.activations == CTX * (28 * 3584 * 2 + 2 * 128 * 2)
    assert fsdp.recomputed_layer == CTX * (saved + 2 * 18944 * 2 + 2 * 3584)
    # without checkpointing every layer keeps its saved set and its fp32 input
    full = plan("qwen2.5-3b", gradient_checkpointing=False)
    saved = 4 * 2048 + 2 * 4 * 2048 + 5 * 2 * 2048 + (2 * 2048 * 2 + 2 * 256 * 2 + 4 * 16) + 4 * 11008 * 2
    assert full.activations == CTX * (36 * (saved + 4 * 2048) + 2 * 128 * 4)
    assert full.recomputed_layer == CTX * (2 * 11008 * 2 + 4 * 2048)


def test_weight_copies_are_autocasts_projections_or_fsdp2s_gathered_units():
    projections = LAYER_3B - 2 * 2048  # the norms are not cast, nor is the embedding (the head casts its slices)
    ddp = plan("qwen2.5-3b")
    assert (ddp.forward_copies, ddp.backward_copies) == (36 * projections * 2, projections * 2)
    fsdp = plan("qwen2.5-7b", sharding="fsdp2", ranks=4)
    # two decoder layers (computing, prefetched) and accelerate's unit of the head and the final norm, in bf16; the
    # untied head's unit is resharded after its backward: the layers' backward holds the two layers only, the head's
    # backward holds its unit too
    head_unit = 152064 * 3584 + 3584
    assert fsdp.forward_copies == (2 * LAYER_7B + head_unit) * 2
    assert (fsdp.backward_copies, fsdp.head_copy) == (2 * LAYER_7B * 2, head_unit * 2)
    # tied (Qwen2.5-3B), the unit holds the embedding too and stays gathered from the first layer's forward to the
    # end of the backward
    tied = plan("qwen2.5-3b", sharding="fsdp2", ranks=4)
    assert tied.forward_copies == tied.backward_copies == (2 * LAYER_3B + 151936 * 2048 + 2048) * 2
    assert tied.head_copy == 0 and plan("qwen2.5-7b").head_copy == 0
    # LoRA: only the fp32 adapters are cast
    assert plan("qwen2.5-3b", lora_params=1000).forward_copies == 1000 * 2


def test_the_rollout_terms():
    hf = plan("qwen2.5-3b", prefill_rows=8, prefill_tokens=1024, rollout_kv_bytes=3 * GiB)
    # generating with fp32 masters under autocast caches the projections and the head in bf16
    assert hf.rollout_weights == (36 * (LAYER_3B - 2 * 2048) + 151936 * 2048) * 2
    assert hf.rollout_prefill == 8 * 1024 * (6 * 2048 + 3 * 11008) * 2 and hf.rollout_kv == 3 * GiB
    # a vLLM engine's share replaces all three
    vllm = plan("qwen2.5-3b", rollout_engine_bytes=32 * 10**9, prefill_rows=8, rollout_kv_bytes=3 * GiB)
    assert (vllm.rollout_weights, vllm.rollout_prefill, vllm.rollout_kv) == (32 * 10**9, 0, 0)


def test_qwen25_3b_full_fine_tuning_on_one_80_gb_gpu_by_hand():
    """bf16 with fp32 masters, AdamW, checkpointing, context 16384, micro-batch 1, ddp on one process, the
    transformers engine as budget=paper runs it (256 episodes of the round prefilled 1024 tokens at a time)."""
    m = plan("qwen2.5-3b", prefill_rows=256, prefill_tokens=1024, rollout_kv_bytes=2 * CTX * 36864)
    resident = 4 * N_3B + 8 * N_3B + 2 * N_3B
    # the forward's peak: checkpoints, autocast's cache of the projections and the recomputed layer's bound
    forward = m.activations + 36 * (LAYER_3B - 4096) * 2 + max(m.recomputed_layer, m.lm_head)
    assert m.moments()["forward"] == forward == max(m.moments().values())
    training = 4 * N_3B + forward
    cached = (36 * (LAYER_3B - 4096) + 151936 * 2048) * 2
    rollout = cached + 256 * 1024 * (6 * 2048 + 3 * 11008) * 2 + 2 * CTX * 36864
    assert m.total == resident + max(training, rollout)
    assert round(m.total / GiB, 1) == 69.2 and round((resident + training) / GiB, 1) == 64.4
    assert m.total < USABLE


def test_qwen25_7b_fsdp2_on_four_80_gb_gpus_with_vllm_at_04_by_hand():
    engine = int(0.4 * 80 * 10**9)
    m = plan("qwen2.5-7b", sharding="fsdp2", ranks=4, rollout_engine_bytes=engine)
    resident = N_7B + N_7B // 4 * 8
    assert m.total == resident + max(m.training, engine) == resident + engine
    assert round(m.total / GiB, 1) == 51.1 and m.total < USABLE


@pytest.mark.parametrize("name", ["qwen2.5-7b", "llama-3.1-8b"])
def test_paper_backbones_fit_four_80_gb_gpus_with_fsdp2_and_not_with_ddp(name):
    from seal.policy.backbones import check_training_fits

    backbone = instantiate(backbone_cfg(name))
    kwargs = dict(episode_tokens=CTX, micro_batch=1, reference=True, gradient_checkpointing=True,
                  rollout_engine_fraction=0.4, available=USABLE, where="GPU")
    assert check_training_fits(backbone, sharding="fsdp2", world=4, **kwargs).total < USABLE
    # data parallelism replicates the state; the refusal names the smallest sharded launch that fits
    smallest = {"qwen2.5-7b": 2, "llama-3.1-8b": 4}[name]
    with pytest.raises(UserError, match=f"on 4 rank.s. with ddp needs .*fsdp2.yaml --num_processes {smallest} "):
        check_training_fits(backbone, sharding="ddp", world=4, **kwargs)


def test_the_transformers_engine_is_planned_with_one_context_of_kv_cache_and_its_prefill_named():
    from seal.policy.backbones import check_training_fits

    backbone = instantiate(backbone_cfg("qwen2.5-3b"))
    kwargs = dict(episode_tokens=CTX, micro_batch=1, reference=True, gradient_checkpointing=True, where="GPU")
    m = check_training_fits(backbone, prefill_rows=256, available=USABLE, **kwargs)
    # an elastic budget must hold at least one context-long episode: its cache and its batched copy
    assert m.rollout_kv == 2 * CTX * 36864
    given = check_training_fits(backbone, available=USABLE, rollout_kv_bytes=5 * GiB, **kwargs)
    assert given.rollout_kv == 5 * GiB
    # with 66 GiB the rollout phase (256 episodes prefilled at once) is what does not fit
    with pytest.raises(UserError, match=r"needs about 69 GiB .*the rollout phase is the peak.* or lower "
                                        r"budget.batch_size$"):
        check_training_fits(backbone, prefill_rows=256, available=66 * GiB, **kwargs)


def test_the_facts_the_plan_rests_on(tmp_path):
    """TRL's head tiles, and what seal's GRPOConfig and accelerate hand the trainer: the plan is wrong if these
    move."""
    from accelerate.utils import DistributedDataParallelKwargs
    from trl.kernels.chunked_logprob import TOKEN_CHUNK_SIZE
    from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

    from seal.policy.memory import HEAD_TOKEN_TILE, HEAD_VOCAB_TILE
    from tests.rl.test_config import args_of
    from tests.test_configs import compose_with

    assert (HEAD_TOKEN_TILE, HEAD_VOCAB_TILE) == (TOKEN_CHUNK_SIZE, _CHUNKED_LOGPROB_CHUNK_SIZE) == (4096, 32768)
    args = args_of(compose_with("budget=paper"), tmp_path, 352, "bfloat16")
    # the head in the compute dtype (no fp32 upcast), checkpointing on, fused AdamW, DDP's bucket size untouched
    assert args.cast_lm_head_to_fp32 is False and args.gradient_checkpointing is True
    assert args.optim == "adamw_torch_fused" and args.ddp_bucket_cap_mb is None
    # transformers' Trainer passes DistributedDataParallelKwargs(find_unused_parameters=...) only
    assert DistributedDataParallelKwargs(find_unused_parameters=False).to_kwargs() == {}
    assert DistributedDataParallelKwargs().gradient_as_bucket_view is False


def test_the_figures_of_the_memory_page_are_the_plans():
    from experiments.measure.memory import USABLE as bench_usable
    from experiments.measure.memory import paper_plans

    # the prose of docs/gpus-and-slurm.md's Memory section (the plan tables below it are written by
    # python -m tests.tools.docs and compared by tests/tools/test_docs.py)
    text = (ROOT / "docs" / "gpus-and-slurm.md").read_text()
    section = text[text.index("### Memory"):text.index("<!-- begin: memory-plan -->")]
    plans = {name: paper_plans(name) for name in ("qwen2.5-3b", "qwen2.5-7b", "llama-3.1-8b")}
    figures = [float(x) for x in re.findall(r"(\d+\.\d) GiB", section)]
    expected = [plans["qwen2.5-3b"]["ddp x1 hf"].training + plans["qwen2.5-3b"]["ddp x1 hf"].resident,
                plans["qwen2.5-3b"]["ddp x1 hf"].total, plans["qwen2.5-3b"]["ddp x1"].total, bench_usable,
                plans["qwen2.5-7b"]["fsdp2 x4"].total, plans["qwen2.5-7b"]["fsdp2 x4 hf"].total,
                plans["qwen2.5-7b"]["ddp x4"].total, plans["llama-3.1-8b"]["fsdp2 x4"].total,
                plans["llama-3.1-8b"]["fsdp2 x2"].total]
    assert figures == [round(x / GiB, 1) for x in expected]
    # and what the page says of them
    assert bench_usable == USABLE and plans["qwen2.5-3b"]["ddp x4"].total > USABLE
    assert plans["llama-3.1-8b"]["fsdp2 x2"].total > USABLE


# a small GQA decoder (4 query heads, 2 KV heads) counted by torch itself, on the meta device (no weights)
SMALL = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=24)


def meta_model(config):
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def numel(module, trainable_only=False):
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_the_parameter_counts_are_what_transformers_builds(kind, tie):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    # Qwen3 with a head_dim (8) other than hidden / heads (4), as its published configs have
    extra = {"qwen3": dict(head_dim=8)}.get(kind, {})
    config = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}[kind](
        **SMALL, **extra, tie_word_embeddings=tie)
    model = meta_model(config)
    assert param_count(config) == numel(model)
    assert layer_param_count(config) == numel(model.model.layers[0])


def test_a_config_that_names_no_tie_nor_type_is_an_untied_llama_as_transformers_defaults_it():
    from transformers import LlamaConfig

    assert LlamaConfig(**SMALL).tie_word_embeddings is False
    model = meta_model(LlamaConfig(**SMALL))
    assert param_count(dict(SMALL)) == numel(model)
    assert layer_param_count(dict(SMALL)) == numel(model.model.layers[0])


@pytest.mark.parametrize("targets", ["all-linear", None, ["q_proj", "v_proj"], ["down_proj", "o_proj"],
                                     ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]],
                         ids=["all-linear", "default", "q v", "down o", "all seven named"])
def test_the_adapter_count_is_what_peft_trains(targets):
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config

    from seal.policy.memory import lora_param_count

    config = Qwen2Config(**SMALL)
    # seal reads None as every projection, which peft calls all-linear (the LM head left out)
    peft_targets = "all-linear" if targets is None else targets
    model = get_peft_model(meta_model(config), LoraConfig(r=3, target_modules=peft_targets))
    assert lora_param_count(config, 3, targets) == numel(model, trainable_only=True)


def test_a_micro_batch_of_two_episodes_holds_what_one_twice_as_long_does():
    two = training_memory(arch("qwen2.5-3b"), compute_dtype="bfloat16", episode_tokens=CTX // 2, micro_batch=2)
    one = plan("qwen2.5-3b")
    assert (two.activations, two.recomputed_layer, two.lm_head) == (one.activations, one.recomputed_layer, one.lm_head)


@pytest.mark.parametrize("kwargs", [dict(sharding="fsdp2", ranks=3), dict(sharding="fsdp2", ranks=1),
                                    dict(lora_params=1001), dict(ranks=3)],
                         ids=["fsdp2 over 3", "fsdp2 on one rank", "lora", "ddp over 3"])
def test_every_term_of_the_plan_is_a_whole_number_of_bytes(kwargs):
    m = plan("qwen2.5-7b", **kwargs)
    terms = {name: getattr(m, name) for name in (*m.RESIDENT, *m.TRAINING, *m.ROLLOUT)}
    assert all(type(v) is int for v in terms.values()), terms


def test_lora_keeps_the_base_in_the_compute_dtype_and_trains_fp32_adapters_by_hand():
    m = plan("qwen2.5-3b", lora_params=1000)
    # bf16 base plus fp32 adapters; the reference is the base with the adapters off (no copy)
    assert (m.weights, m.reference) == (2 * N_3B + 4 * 1000, 0)
    # AdamW's two fp32 moments and the fp32 gradients of the adapters only
    assert (m.optimizer, m.gradients) == (8 * 1000, 4 * 1000)
    # autocast casts the fp32 adapters in the forward; the backward recomputes over bf16 weights: no copies
    assert (m.forward_copies, m.backward_copies) == (2 * 1000, 0)
    # generating under autocast caches the adapters' bf16 casts, not the (already bf16) base
    assert m.rollout_weights == 2 * 1000


def test_fp32_training_has_no_masters_so_autocast_casts_nothing():
    m = training_memory(arch("qwen2.5-3b"), compute_dtype="float32", episode_tokens=CTX)
    # the weights are themselves the fp32 tensors the optimizer steps; the reference is an fp32 copy
    assert (m.weights, m.reference, m.optimizer, m.gradients) == (4 * N_3B, 4 * N_3B, 8 * N_3B, 4 * N_3B)
    assert (m.forward_copies, m.backward_copies, m.rollout_weights) == (0, 0, 0)


def test_without_checkpointing_a_bf16_stream_keeps_each_layers_saved_set_and_no_fp32_input():
    m = plan("qwen2.5-7b", sharding="fsdp2", ranks=4, gradient_checkpointing=False)
    # as in the checkpointed case: each norm's fp32 upcast and bf16 output, the two shared projection inputs,
    # SDPA's tensors and log-sum-exp, the MLP's four; the bf16 rotary cos/sin shared by every layer
    saved = 2 * 4 * 3584 + 2 * 2 * 3584 + 2 * 2 * 3584 + (2 * 3584 * 2 + 2 * 512 * 2 + 4 * 28) + 4 * 18944 * 2
    assert m.activations == CTX * (28 * saved + 2 * 128 * 2)
    assert m.recomputed_layer == CTX * (2 * 18944 * 2 + 2 * 3584)


def test_the_prefill_defaults_to_one_episode_of_one_chunk_and_no_kv_budget():
    from seal.policy.generation_hf import PREFILL_CHUNK

    m = plan("qwen2.5-3b")
    # one episode forwarding PREFILL_CHUNK tokens: its q/k/v/o-sized and MLP-sized tensors in bf16
    assert m.rollout_prefill == PREFILL_CHUNK * (6 * 2048 + 3 * 11008) * 2 and m.rollout_kv == 0


def test_an_unknown_sharding_and_lora_under_fsdp2_are_refused_in_one_sentence():
    with pytest.raises(ValueError, match=r"^sharding 'zero3': choose one of ddp, fsdp2$"):
        plan("qwen2.5-3b", sharding="zero3")
    with pytest.raises(ValueError, match=r"^LoRA adapters are trained with ddp only$"):
        plan("qwen2.5-3b", sharding="fsdp2", ranks=2, lora_params=1000)


def test_the_three_moments_and_the_table_in_gib():
    from seal.policy.memory import TrainingMemory

    # a distinct power of two per term, so that every sum names its terms
    m = TrainingMemory(weights=GiB, optimizer=2 * GiB, reference=0, gradients=4 * GiB, activations=8 * GiB,
                       recomputed_layer=16 * GiB, forward_copies=32 * GiB, backward_copies=64 * GiB,
                       lm_head=128 * GiB, lm_head_grads=256 * GiB, ddp_buckets=512 * GiB, rollout_copy=0,
                       rollout_weights=1024 * GiB, rollout_prefill=2048 * GiB, rollout_kv=4096 * GiB,
                       reduce_scatter=8192 * GiB, loaded=16384 * GiB, host_loaded=3 * GiB, host_reference_loaded=6 * GiB,
                       host_reference=5 * GiB, head_copy=GiB // 2)
    # the forward: checkpoints, the weight copies and the larger of a recomputed layer and the head
    # the head's backward: checkpoints, the backward's copies, an untied head's FSDP2 unit, the head's working set and
    # its gradients; a layer's backward: checkpoints, the backward's copies, the recomputed layer, FSDP2's reduction of it
    assert m.moments() == {"forward": (8 + 32 + 128) * GiB, "head backward": (8 + 64 + 0.5 + 128 + 256) * GiB,
                           "layer backward": (8 + 64 + 16 + 8192) * GiB}
    assert m.table() == [
        ("weights", 1.0), ("optimizer", 2.0), ("reference", 0.0), ("ddp buckets", 512.0), ("rollout copy", 0.0),
        ("gradients", 4.0), ("activations", 8.0), ("recomputed layer", 16.0), ("forward copies", 32.0),
        ("backward copies", 64.0), ("head copy", 0.5), ("lm head", 128.0), ("lm head grads", 256.0), ("reduce scatter", 8192.0),
        ("rollout weights", 1024.0), ("rollout prefill", 2048.0), ("rollout kv", 4096.0),
        # gradients and a layer's backward; the rollout's three; before training the loaded weights and the
        # rollout; the total is the larger of that and the resident part plus the larger phase
        ("training phase", 4.0 + 8280.0), ("rollout phase", 7168.0), ("before training", 16384.0 + 7168.0),
        ("total", 16384.0 + 7168.0), ("host per rank", 3.0 + 6.0)]
    # once the reference's shard outweighs the loaded model and the whole reference, it is the host's peak
    m.host_reference = 10 * GiB
    assert m.host == 10 * GiB
    # without the loaded weights on the device, training is the peak
    m.loaded = 0
    assert m.total == (515 + 8284) * GiB and m.before_training == 7168 * GiB


def test_fsdp2_reduces_one_layers_gradients_at_a_time_and_keeps_the_loaded_model_on_the_host_by_hand():
    """Qwen2.5-7B on 4 ranks: a layer's unsharded bf16 gradients (2 bytes a parameter) beside the fp32
    reduce-scatter input (4 bytes a parameter) of the unit reduced before it, which torch keeps until the next
    reduction: before the last layer's backward that is the untied head's unit (head and final norm), larger than
    a layer; at the layer's own reduction its bf16 gradients give way to its fp32 input and then its fp32 shard.
    The fp32 masters (4 bytes a parameter) in host memory until the trainer shards them, with TRL's whole bf16
    reference (2) loaded beside them before it is sharded (GRPOTrainer's __init__; the policy is sharded in
    train()), the reference's bf16 quarter there during training."""
    fsdp = plan("qwen2.5-7b", sharding="fsdp2", ranks=4)
    assert fsdp.reduce_scatter == (152064 * 3584 + 3584) * 4 + LAYER_7B * 2
    assert fsdp.moments()["layer backward"] == fsdp.activations + fsdp.backward_copies + fsdp.recomputed_layer + \
        fsdp.reduce_scatter
    assert fsdp.moments()["head backward"] == fsdp.activations + fsdp.backward_copies + fsdp.head_copy + \
        fsdp.lm_head + fsdp.lm_head_grads
    # tied (Qwen2.5-3B): the head's unit is reduced last, once the embedding's gradient has joined the head's: its
    # unsharded bf16 gradient stays through every layer's backward, and the input kept is a layer's
    tied = plan("qwen2.5-3b", sharding="fsdp2", ranks=4)
    assert tied.reduce_scatter == LAYER_3B * 4 + LAYER_3B * 2 + (151936 * 2048 + 2048) * 2
    # on one rank the layer's fp32 shard is all of it: input and shard (4 + 4) outweigh the bf16 gradient and input
    one = plan("qwen2.5-3b", sharding="fsdp2", ranks=1)
    assert one.reduce_scatter == LAYER_3B * 4 + LAYER_3B * 4 + (151936 * 2048 + 2048) * 2
    assert (fsdp.loaded, fsdp.host_loaded, fsdp.host_reference) == (0, N_7B * 4, N_7B * 2 // 4)
    assert fsdp.host == N_7B * (4 + 2)
    # without a KL term (beta 0) TRL loads no reference
    assert plan("qwen2.5-7b", sharding="fsdp2", ranks=4, reference=False).host == N_7B * 4
    # over 3 ranks the bf16 reference (2 N bytes, 2 over a multiple of 3) splits unevenly: the largest shard counts,
    # in whole bytes
    three = plan("qwen2.5-7b", sharding="fsdp2", ranks=3)
    assert three.host_reference == (N_7B * 2 + 1) // 3 and type(three.host_reference) is int
    # before training the device holds the rollout only: here the transformers engine's bf16 copy and its KV
    assert fsdp.before_training == fsdp.rollout_copy + fsdp.rollout == N_7B * 2 + fsdp.rollout
    # ddp reduces nothing layer by layer (its buckets are resident) and loads the fp32 masters onto the device
    ddp = plan("qwen2.5-3b")
    assert (ddp.reduce_scatter, ddp.loaded, ddp.host) == (0, ddp.weights, 0) and ddp.weights == N_3B * 4


def test_at_table_4s_share_the_8b_phase_before_training_no_longer_holds_its_fp32_model():
    """The issue's case: Llama-3.1-8B at gpu_memory_utilization 0.6 on 4 x 80 GB. Loaded onto the GPU in fp32
    (29.9 GiB) beside the engine's 48 GB share, the phase before training needed about 78 of 79 GiB; kept on
    the host until sharded, the engine's share alone."""
    engine = int(0.6 * 80 * 10**9)
    m = plan("llama-3.1-8b", sharding="fsdp2", ranks=4, rollout_engine_bytes=engine)
    assert m.before_training == engine
    n = 8_030_261_248  # Llama-3.1-8B's parameters (its model card's 8.03B)
    # the whole fp32 model is on the host instead, 29.9 GiB
    assert (m.loaded, m.host_loaded) == (0, n * 4) and round(n * 4 / GiB, 1) == 29.9
    # loaded onto the GPU as before (ddp's placement), the phase held 74.6 GiB in tensors alone
    before = plan("llama-3.1-8b", sharding="ddp", ranks=1, rollout_engine_bytes=engine).before_training
    assert before == n * 4 + engine and round(before / GiB, 1) == 74.6


def test_a_config_that_names_no_kv_heads_has_one_per_query_head_as_transformers_defaults_it():
    from transformers import LlamaConfig

    mha = {k: v for k, v in SMALL.items() if k != "num_key_value_heads"}
    assert LlamaConfig(**mha).num_key_value_heads == 4
    # 2 layers x 4 KV heads x 4 dims x (k, v) x 2 bytes
    assert kv_bytes_per_token(mha, "bfloat16") == kv_bytes_per_token(LlamaConfig(**mha), "bfloat16") == 128
    # and a head of hidden / heads dimensions, a whole number
    assert type(kv_bytes_per_token(mha, "bfloat16")) is int and type(param_count(mha)) is int

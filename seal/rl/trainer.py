"""The one subclass of TRL's GRPOTrainer, and where TRL's call order meets SEAL's round.

Per round (one TRL generation batch), TRL calls, in this order:

    _generate_and_score_completions    rollout_func = CoEvolution.play_round (this rank's episodes);
                                       verifier rewards; group-relative advantages A_j;
                                       then here: CoEvolution.close_round -> A~_j = w_j A_j;
                                       the sampler-trainer gap and, when asked, truncated IS
    _get_per_token_logps_and_entropies old-policy and reference log-probs (trimmed per micro-batch here)
    _compute_loss, steps_per_round x   the clipped GRPO objective (TRL) + the KL term (here, as verl's
                                       low_var_kl), one optimizer step per mini-batch
    SealStateCallback.on_step_end      at the round's last step: CoEvolution.finish_round, with the
                                       optimizer's signals (KL, clip ratios, entropy, grad norm)
    on_save                            seal_state.json into the checkpoint TRL has just written

Everything SEAL-specific is a plain function or a CoEvolution method; the GRPO loss, clipping and
optimisation are TRL's own.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from omegaconf import DictConfig
from transformers import TrainerCallback
from trl import GRPOTrainer


def low_var_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """verl's `low_var_kl` per token: the k3 estimator exp(r) - r - 1 of KL(pi || pi_ref), r = log
    pi_ref - log pi (log-ratio clamped to [-20, 20] against overflow), clamped to [-10, 10]. No
    importance-ratio factor (TRL's `use_bias_correction_kl` would multiply one in).

    Computed in float64: for nearby policies exp(r) - r - 1 is about r^2 / 2, and in float32 the
    subtraction from exp(r) ~ 1 keeps only a few of its digits (r = 1e-3: a quarter of the value is
    rounding). The result is float64; the caller casts what enters the loss."""
    r = torch.clamp(ref_logps.double() - logps.double(), -20.0, 20.0)
    return torch.clamp(torch.expm1(r) - r, -10.0, 10.0)


def check_logprob_dtypes(logps: torch.Tensor, batch: dict[str, Any]) -> None:
    """The policy's, the old policy's and the reference's log-probs reach the loss in float32, as TRL's fused LM
    head computes them, not in a half-precision dtype. In bf16 (a sharding policy casting the model's outputs:
    accelerate's own FSDP2 policy) the importance ratios and the KL term of nearby policies round to noise
    without any error, so a run stops at its first micro-batch instead (seal.rl.sharding's policy casts no
    output)."""
    given = {"policy": logps, "old policy": batch.get("old_per_token_logps"),
             "reference": batch.get("ref_per_token_logps")}
    low = [f"{name} {t.dtype}".replace("torch.", "") for name, t in given.items()
           if t is not None and t.dtype in (torch.bfloat16, torch.float16)]
    if low:
        raise RuntimeError(
            f"log-probs reached the loss in low precision ({', '.join(low)}; float32 expected): the ratios and the "
            "KL term would be rounding noise. Something casts the model's outputs: check the sharding's "
            "mixed-precision policy (seal.rl.sharding.mixed_precision_policy casts none)"
        )


def loss_mask(batch: dict[str, Any]) -> torch.Tensor:
    """The tokens the loss trains on: completion tokens the model wrote (TRL's completion mask times the
    rollout's environment mask, which TRL keeps as tool_mask)."""
    mask = batch["completion_mask"]
    return mask * batch["tool_mask"] if "tool_mask" in batch else mask


def logprob_gap_totals(logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(sum of |trainer log-prob - sampler log-prob| over the masked tokens, their count): what the
    round's `train/logprob_gap` averages, the rollout engine's numerics against the trainer's."""
    mask = mask.float()
    return torch.stack([((logps - sampling_logps).abs() * mask).sum(), mask.sum()]).detach()


def truncated_importance_weights(old_logps: torch.Tensor, sampling_logps: torch.Tensor, mask: torch.Tensor,
                                 cap: float) -> torch.Tensor:
    """TRL's token-level truncated importance sampling (vllm_importance_sampling_mode="token_truncate"):
    per token exp(old - sampling), the trainer's probability of the sampled token over the sampler's,
    at most `cap`; 1 outside the mask."""
    return torch.exp((old_logps - sampling_logps) * mask).clamp(max=cap).detach()


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str) -> torch.Tensor:
    """A per-token term reduced the way TRL reduces the policy loss of `loss_type` (before the
    gradient-accumulation normaliser): `grpo` averages each episode's tokens, then the episodes
    (verl's token-mean over micro-batches of one episode); `bnpo` averages all tokens of the micro-batch."""
    if loss_type == "grpo":
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    raise ValueError(f"loss_type {loss_type!r} is not supported with the KL term; use grpo or bnpo")


# the epsilon TRL adds to a group's reward std before dividing
TRL_STD_EPSILON = 1e-4


def group_std_rescale(rewards: list[float], group_size: int, epsilon: float) -> list[float]:
    """Per-episode factors that turn TRL's (r - mean) / (std + 1e-4) into (r - mean) / (std + epsilon),
    std being each group's unbiased standard deviation (groups are consecutive runs of `group_size`)."""
    factors = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        mean = sum(group) / len(group)
        std = (sum((r - mean) ** 2 for r in group) / max(len(group) - 1, 1)) ** 0.5
        factors += [(std + TRL_STD_EPSILON) / (std + epsilon)] * len(group)
    return factors


def trim_bounds(attention_mask: torch.Tensor, completion_width: int) -> tuple[int, int]:
    """Columns [left, right) of a left-padded prompt + right-padded completion batch that any row uses."""
    used = attention_mask.bool().any(0)
    prompt_width = attention_mask.shape[1] - completion_width
    left = int(used[:prompt_width].nonzero()[0]) if used[:prompt_width].any() else prompt_width
    tail = used[prompt_width:].nonzero()
    right = prompt_width + (int(tail[-1]) + 1 if len(tail) else 1)
    return left, right


def loaded_through_a_tie(model: Any, missing: list[str]) -> set[str]:
    """The `missing` keys of a loaded state dict whose parameter is the same tensor as one that was loaded (a tied LM
    head, saved once as the embedding): loading the other loaded it."""
    names: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(param), []).append(name)
    absent = set(missing)
    return {name for group in names.values() if any(n not in absent for n in group) for name in group if name in absent}


class SealGRPOTrainer(GRPOTrainer):
    def __init__(self, *args: Any, coevolution: Any, std_epsilon: float = TRL_STD_EPSILON,
                 tis_cap: float | None = None, shuffle_minibatches: bool = True,
                 logprob_dir: Path | None = None, **kwargs: Any):
        from seal.rl.sharding import reference_sharded_per_layer

        self.coevolution = coevolution
        # the round's optimisation on the console and in run.log (OptimisationProgress; None: not shown)
        self.optimisation: OptimisationProgress | None = None
        # where every micro-batch's log-probs are written (trainer.save_logprobs; None: nowhere)
        self.logprob_dir = logprob_dir
        # told the seconds each checkpoint took to write (the job's clock; None: no one)
        self.on_checkpoint: Callable[[float], None] | None = None
        self._logprob_step: int | None = None
        self._micro_batches = 0
        # the epsilon under a group's reward std (TRL's is fixed at 1e-4; the release uses 1e-6)
        self.std_epsilon = float(std_epsilon)
        # truncated importance sampling against the rollout engine's log-probs: the ratio's cap (None: off)
        self.tis_cap = None if tis_cap is None else float(tis_cap)
        self._capture: dict[str, torch.Tensor] | None = None
        # TRL 1.16 shuffles a round's episodes before cutting mini-batches (_prepare_inputs calls
        # shuffle_sequence_dict whatever args.shuffle_dataset says: that one orders the prompts); the
        # release takes them in order (protocol.shuffle_minibatches)
        self.shuffle_minibatches = bool(shuffle_minibatches)
        with reference_sharded_per_layer():
            super().__init__(*args, **kwargs)

    def create_accelerator_and_postprocess(self) -> None:
        """transformers' accelerator, kept on the FSDP2 path on a CPU (seal.rl.sharding.shard_on_gloo)."""
        super().create_accelerator_and_postprocess()
        if self.args.fsdp_plugin_args is not None and not self.is_fsdp_enabled:
            from seal.rl.sharding import shard_on_gloo

            shard_on_gloo(self.accelerator, self.args.fsdp_plugin_args)
            self.is_fsdp_enabled = True

    def _save_checkpoint(self, model, trial):
        """TRL's checkpoint; old ones are deleted only once it is complete, and a failed save stops the run
        in one sentence with the previous complete checkpoint intact (seal.rl.checkpoint.write_checkpoint)."""
        from functools import partial

        from seal.rl.checkpoint import write_checkpoint

        started = time.perf_counter()
        write_checkpoint(self, partial(super()._save_checkpoint, model, trial))
        if self.on_checkpoint is not None:
            self.on_checkpoint(time.perf_counter() - started)

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """transformers' warnings on a resumed checkpoint, without the keys loaded through a tie (a tied head is
        saved once, as the embedding: its absence is no loss)."""
        tied = loaded_through_a_tie(self.model, load_result.missing_keys)
        missing = [k for k in load_result.missing_keys if k not in tied]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def _prepare_inputs(self, generation_batch: Any) -> Any:
        seed = None if not self.shuffle_minibatches else minibatch_seed(
            self.args.seed, self.state.global_step, self.accelerator.process_index)
        with minibatch_order(seed):
            return super()._prepare_inputs(generation_batch)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        weights = self.coevolution.close_round(self.state.global_step)
        if self.optimisation is not None:
            self.optimisation.begin(len(self.coevolution.history) - 1)
        epsilon = self.std_epsilon
        if self.scale_rewards == "group" and epsilon != TRL_STD_EPSILON:
            rewards = self.coevolution.round_rewards()
            n = len(out["advantages"])
            rank = self.accelerator.process_index
            factors = group_std_rescale(rewards, self.num_generations, epsilon)[rank * n : (rank + 1) * n]
            out["advantages"] = scale_advantages(out["advantages"], factors)
        if weights is not None:
            out["advantages"] = scale_advantages(out["advantages"], weights)
        return self._sampler_against_trainer(out)

    def _sampler_against_trainer(self, out: dict[str, Any]) -> dict[str, Any]:
        """Compare the rollout engine's log-probs with the trainer's under the weights that sampled them,
        and correct for the gap when asked.

        Those trainer log-probs exist here when TRL scored the batch before its first optimizer step (it
        does when a round takes several steps); otherwise every micro-batch of the round runs before the
        round's one step, and `_compute_loss` logs the gap from its own log-probs. The correction needs
        them here: without TRL's, one scoring pass makes them. TRL multiplies its per-token policy loss by
        the detached, non-negative ratio and adds the KL term afterwards, so for the grpo and bnpo losses
        multiplying each token's advantage by it is the same (TRL's own correction is tied to use_vllm,
        which seal cannot set: the rollout function has its own engine)."""
        sampling = out.get("sampling_per_token_logps")
        if sampling is None:
            return out
        if self.tis_cap is not None and "old_per_token_logps" not in out:
            out["old_per_token_logps"] = self._score(out)
        old = out.get("old_per_token_logps")
        if old is None:
            return out
        mask = loss_mask(out)
        self._log_logprob_gap(logprob_gap_totals(old, sampling, mask))
        if self.tis_cap is not None:
            ratio = truncated_importance_weights(old, sampling, mask, self.tis_cap)
            advantages = out["advantages"]
            out["advantages"] = (advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages) * ratio
        return out

    def _score(self, batch: dict[str, Any]) -> torch.Tensor:
        """The current model's log-probs of the batch's completion tokens (no gradient), as TRL scores
        the old policy."""
        from trl.models.utils import disable_gradient_checkpointing

        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model, ids, attention, batch["completion_ids"].shape[1],
                batch_size=self.args.per_device_train_batch_size)
        return logps

    def _log_logprob_gap(self, totals: torch.Tensor) -> None:
        totals = self.accelerator.reduce(totals, reduction="sum")
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["logprob_gap"].append((totals[0] / totals[1].clamp(min=1.0)).item())

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, **kwargs):
        """TRL's scoring, with each micro-batch cut to the columns its own rows use: the rounds' episodes
        are padded to the round's longest, and a short episode must not pay for the longest one."""
        if any(v is not None for k, v in kwargs.items() if k != "compute_aux_loss"):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, **kwargs)
        batch_size = batch_size or input_ids.size(0)
        logps, entropies, aux = [], [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
            left, right = trim_bounds(mask, logits_to_keep)
            keep = right - (mask.shape[1] - logits_to_keep)
            lp, ent, a = super()._get_per_token_logps_and_entropies(
                model, ids[:, left:right], mask[:, left:right], keep, batch_size=ids.size(0),
                compute_entropy=compute_entropy, **kwargs)
            logps.append(F.pad(lp, (0, logits_to_keep - keep)))
            if ent is not None:
                entropies.append(F.pad(ent, (0, logits_to_keep - keep)))
            if a is not None:
                aux.append(a)
        logps = torch.cat(logps)
        if self._capture is not None and compute_entropy:
            self._capture["logps"] = logps
        return logps, torch.cat(entropies) if entropies else None, torch.stack(aux).mean() if aux else None

    def _compute_loss(self, model, inputs):
        """TRL's clipped objective with its own KL term switched off, plus the KL term (the release's low_var_kl
        estimator at the paper's coefficient); and the sampler-trainer gap when this round's log-probs are still
        those of the weights that sampled it."""
        beta, self.beta = self.beta, 0.0
        self._capture = {}
        try:
            loss = super()._compute_loss(model, inputs)
            logps = self._capture.get("logps")
        finally:
            self.beta, self._capture = beta, None
        check_logprob_dtypes(logps, inputs)
        mask = loss_mask(inputs)
        if "sampling_per_token_logps" in inputs and "old_per_token_logps" not in inputs:
            self._log_logprob_gap(logprob_gap_totals(logps, inputs["sampling_per_token_logps"], mask))
        if self.logprob_dir is not None:
            self._write_logprobs(logps, inputs, mask)
        if beta == 0.0:
            return loss
        kl = low_var_kl(logps, inputs["ref_per_token_logps"])
        mask = mask.double()
        mode = "train" if self.model.training else "eval"
        normalizer = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        loss = loss + (beta * aggregate(kl, mask, self.loss_type) / normalizer).to(loss.dtype)
        totals = self.accelerator.reduce(torch.stack([(kl * mask).sum(), mask.sum()]).detach(), reduction="sum")
        self._metrics[mode]["kl"].append((totals[0] / totals[1].clamp(min=1.0)).item())
        return loss

    def _write_logprobs(self, logps: torch.Tensor, inputs: dict[str, Any], mask: torch.Tensor) -> None:
        """One micro-batch's per-token log-probs as they reach the loss (the policy's, the old policy's and the
        reference's, in their own dtype) and its loss mask: <logprob_dir>/step<k>_rank<r>_<i>.pt for the i-th
        micro-batch of optimizer step k (from 1), so that the run's KL and ratios can be recomputed offline."""
        step = self.state.global_step + 1
        if step != self._logprob_step:
            self._logprob_step, self._micro_batches = step, 0
        record = {"logps": logps, "mask": mask, **{name: inputs[key] for name, key in (
            ("ref_logps", "ref_per_token_logps"), ("old_logps", "old_per_token_logps")) if inputs.get(key) is not None}}
        self.logprob_dir.mkdir(parents=True, exist_ok=True)
        name = f"step{step:05d}_rank{self.accelerator.process_index}_{self._micro_batches:03d}.pt"
        torch.save({k: v.detach().cpu() for k, v in record.items()}, self.logprob_dir / name)
        self._micro_batches += 1


def minibatch_seed(seed: int, global_step: int, rank: int) -> int:
    """The seed of a round's mini-batch shuffle on one rank: the run's seed, the optimizer step the round starts
    at and the rank, so that a resumed run shuffles each round as the unbroken run did."""
    digest = hashlib.blake2b(f"{int(seed)}:{int(global_step)}:{int(rank)}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


@contextlib.contextmanager
def minibatch_order(seed: int | None):
    """TRL's mini-batch shuffle for the duration (it is looked up in TRL's module at call time, so swapping that
    name is the whole change; restored even when the step fails): the identity with seed=None (the release's
    order), else TRL's own shuffle drawn from `seed` (minibatch_seed), with the process's RNG left as it was.
    TRL draws it from the global RNG, whose state at a round's start differs between an unbroken run and one
    resumed at an epoch's first round (transformers restores the checkpoint's RNG after the epoch's data loader
    has drawn from it): the rounds are the same either way, but once each micro-batch's gradients are reduced
    over the ranks on their own (FSDP2's sync_each_batch) the order changes the sums' rounding."""
    from trl.trainer import grpo_trainer

    shuffle = grpo_trainer.shuffle_sequence_dict

    def seeded(batch: Any) -> Any:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return shuffle(batch)

    grpo_trainer.shuffle_sequence_dict = (lambda batch: batch) if seed is None else seeded
    try:
        yield
    finally:
        grpo_trainer.shuffle_sequence_dict = shuffle


def scale_advantages(advantages: torch.Tensor, weights: list[float]) -> torch.Tensor:
    """A~_j = w_j * A_j, for advantages of shape (B,) or (B, T)."""
    w = torch.as_tensor(weights, dtype=advantages.dtype, device=advantages.device)
    if w.shape[0] != advantages.shape[0]:
        raise ValueError(f"{w.shape[0]} weights for {advantages.shape[0]} advantages")
    return advantages * (w if advantages.dim() == 1 else w.unsqueeze(-1))


class OptimisationProgress(TrainerCallback):
    """A round's optimisation as it goes, counted in micro-batches (seal.policy.progress: a bar cleared when the
    round's last optimizer step is done, and lines in run.log): the round starts when its rollouts are closed
    (`begin`), and every micro-batch of every optimizer step moves it."""

    def __init__(self, micro_batches: int):
        self.micro_batches = micro_batches
        self.progress: Any = None

    def begin(self, round_: int) -> None:
        from seal.policy.progress import Progress

        self.end()
        self.progress = Progress(f"round {round_} · optimisation", self.micro_batches, unit="micro-batch", leave=False)

    def end(self) -> None:
        if self.progress is not None:
            self.progress.close()
            self.progress = None

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.progress is not None:
            self.progress.advance(1)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.progress is not None:
            self.progress.advance(1)
            if self.progress.done >= self.progress.total:
                self.end()


class ShardedPrecision(TrainerCallback):
    """At the start of training, once accelerate has sharded the policy, that FSDP2 holds seal's mixed precision
    policy on it (seal.rl.sharding.check_policy; the reference's is checked when the trainer is built), and
    that transformers' loop will reduce every micro-batch (what it reads: the accelerator's sync_each_batch)."""

    def __init__(self, compute_dtype: str, accelerator: Any):
        self.compute_dtype = compute_dtype
        self.accelerator = accelerator

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        from seal.rl.sharding import check_policy

        check_policy(model, self.compute_dtype, "policy")
        if not self.accelerator.gradient_state.plugin_kwargs.get("sync_each_batch"):
            raise RuntimeError("the accelerator would accumulate FSDP2's gradients unreduced (no sync_each_batch): the "
                               "installed transformers passes accelerator_config on differently (requirements.txt pins it)")


class Prepared(TrainerCallback):
    """Calls `call()` once the trainer has prepared the model, its optimizer and any checkpoint it resumes, just
    before the first step (the job's clock starts round 0 there: that one-off preparation is no round's time)."""

    def __init__(self, call: Callable[[], None]):
        self.call = call

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.call()


class StepLogCallback(TrainerCallback):
    """Each optimizer step's logged values, as one record of the `trainer.steps` logger (run.log only)."""

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
        logging.getLogger("trainer.steps").info("step %d: %s", state.global_step, logs)


def verifier_reward(completions: list[Any], verifier_reward: list[float], **_: Any) -> list[float]:
    """The reward is the official verifier's binary verdict, passed through from the rollouts."""
    return list(verifier_reward)


def make_trainer(
    cfg: DictConfig,
    *,
    budget: Any,
    model: Any,
    tokenizer: Any,
    coevolution: Any,
    train_ids: list[str],
    out_dir: Path,
    compute_dtype: str = "float32",
    peft_config: Any = None,
    sharding: str = "ddp",
) -> SealGRPOTrainer:
    """TRL's trainer for one run of `budget` (a seal.budget.Budget, planned for the launch's ranks):
    prompts are entry ids, the rollout function plays them."""
    import os

    from datasets import Dataset

    from seal.rl.checkpoint import SealStateCallback
    from seal.rl.config import grpo_config, score_labelled_positions_only

    args = grpo_config(cfg, budget, out_dir, len(train_ids), compute_dtype, sharding)
    score_labelled_positions_only()
    # rollout_func is marked experimental in TRL 1.16; it is the documented multi-turn hook
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    trainer = SealGRPOTrainer(
        model=model,
        reward_funcs=verifier_reward,
        args=args,
        train_dataset=Dataset.from_dict({"prompt": list(train_ids)}),
        processing_class=tokenizer,
        rollout_func=coevolution.play_round,
        peft_config=peft_config,
        callbacks=[SealStateCallback(coevolution, budget.steps_per_round)],
        coevolution=coevolution,
        std_epsilon=cfg.trainer.get("std_epsilon", TRL_STD_EPSILON),
        tis_cap=cfg.trainer.get("tis_cap"),
        shuffle_minibatches=bool(cfg.get("protocol", {}).get("shuffle_minibatches", True)),
        logprob_dir=out_dir / "logprobs" if cfg.trainer.get("save_logprobs") else None,
    )
    # the console gets one line per round from the loop; each optimizer step's dict goes to run.log
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    trainer.add_callback(StepLogCallback())
    if sharding == "fsdp2":
        from seal.rl.sharding import check_reference

        check_reference(trainer.ref_model, compute_dtype)
        trainer.add_callback(ShardedPrecision(compute_dtype, trainer.accelerator))
    if getattr(coevolution, "progress", False):
        trainer.optimisation = OptimisationProgress(budget.plan.micro_steps_per_rank)
        trainer.add_callback(trainer.optimisation)
    return trainer

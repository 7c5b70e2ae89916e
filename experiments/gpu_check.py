"""`python -m experiments.gpu_check`: a preflight to run on one GPU node before spending GPU hours.

    python -m experiments.gpu_check                                    # qwen2.5-3b, its published shape
    python -m experiments.gpu_check --backbone qwen2.5-7b --processes 4 --engine vllm   # the paper's 7B node
    python -m experiments.gpu_check --backbone llama-3.1-8b --out /scratch/preflight
    python -m experiments.gpu_check -- trainer.learning_rate=1e-5      # Hydra overrides for both runs
    python -m experiments.gpu_check --tiny                             # a tiny shape (automatic without CUDA)
    python -m experiments.gpu_check --processes 2                      # on a CPU: the same steps on two gloo ranks
    python -m experiments.gpu_check --sharding fsdp2 --engine vllm     # one GPU, the 4-GPU node's FSDP2 path

The disk the runs need (checkpoints, models, the built model) is printed first, and a disk too small is
refused before anything is built; each run's timeout grows with what it loads and writes. On a node with more
GPUs than --processes the runs see only the first --processes of them (CUDA_VISIBLE_DEVICES), which is printed.

Steps, each timed:
  build       a randomly initialised model of the backbone's published shape (`arch` in
              conf/backbone/<name>.yaml, its published vocabulary size included; nothing is downloaded) with
              the embedded SmolLM2 tokenizer (whose ids cover the first 49,152 rows), saved in the backbone's
              dtype under --out; the runs load it through backbone.local_path
  sanity      `run.py task=sanity` at the run's learning rate: does training move this backbone?
  train       `run.py task=train experiment=seal budget=paper_miniature`: the paper arm at the paper
              budget with only its sizes shrunk (the paper's context length, several optimizer steps per
              round, validation after every round with the best model kept, the out-of-domain benchmark
              before and after, the initial, final and best models on test), on --processes ranks with
              --sharding and --engine (an accelerate launch with the sharding's config when there are several)
  log-probs   both runs save every micro-batch's log-probs as they reach the loss (trainer.save_logprobs): the
              policy's, the old policy's and the reference's must be float32 and not bf16 values only, and each
              round's train/kl must equal a float64 recomputation from them (1e-6 relative); the sanity run's
              KL is the telling one (its policy leaves the reference at once; a random model earns the train
              run no reward)
  checkpoint  the last round's checkpoint is complete (seal_state.json in it) in the sharding's layout:
              model.safetensors under ddp, accelerate's sharded pytorch_model_fsdp_0/ under fsdp2
  throughput  `make bench`'s rollout measurement (experiments.measure.rollout.throughput_rows) on the built
              model: aggregate new tokens/s of the transformers backend at THROUGHPUT_EPISODES concurrent
              episodes of distinct entries, in a child process of its own
Without CUDA the same steps run on a tiny shape of the same model type; there only the mechanics count
(a random model does not learn the sanity task at lr 1e-6), so a flat sanity reward is reported, not failed.

Peak memory: each run is run.py executed by runpy (as `python run.py` executes it) under a wrapper that
writes, at exit, the process's torch.cuda.max_memory_allocated and max_memory_reserved and its peak
resident memory; with several processes every rank writes its own and the table shows the largest. That
is the figure the memory plan estimates (tensors); nvidia-smi would see the whole process (CUDA context,
the allocator's cache) and only at its sampling instants, missing short peaks.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from experiments.measure.preflight.node import preflight
from experiments.measure.preflight.runs import Launch, child
from experiments.measure.preflight.steps import ENGINES, SHARDINGS, Failure
from seal.errors import UserError


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--child"]:  # one rank of a step's launch (run_command)
        child(argv[1:])
        return 0
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    parser = argparse.ArgumentParser(prog="python -m experiments.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="qwen2.5-3b", help="conf/backbone/<name>.yaml with an `arch`")
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: outputs/gpu_check/<backbone>)")
    parser.add_argument("--tiny", action="store_true", help="the tiny shape even with CUDA (always without it)")
    parser.add_argument("--keep", action="store_true", help="keep the runs' checkpoints and final model")
    parser.add_argument("--step-timeout", type=float, default=None,
                        help="seconds one run may take (default: 10 min, more for larger models and vLLM)")
    parser.add_argument("--processes", type=int, default=1,
                        help="ranks of the sanity and train runs, one per GPU (on a CPU: gloo processes)")
    parser.add_argument("--sharding", choices=SHARDINGS, default=None,
                        help="launch.sharding of the runs (default: fsdp2 with several processes, else ddp; "
                             "fsdp2 on one process checks on one GPU what a node of several computes)")
    parser.add_argument("--engine", choices=ENGINES, default="transformers",
                        help="backbone.generation of the runs (vllm: the paper's, needs vLLM installed)")
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    out = args.out or Path("outputs") / "gpu_check" / args.backbone
    launch = Launch(args.processes, args.sharding or ("fsdp2" if args.processes > 1 else "ddp"), args.engine)
    try:
        preflight(args.backbone, out, tiny=True if args.tiny else None, overrides=overrides, keep=args.keep,
                  step_timeout=args.step_timeout, launch=launch)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Failure as exc:
        print(f"gpu_check failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

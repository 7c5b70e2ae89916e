"""A training job that owns several GPUs starts one process per GPU with accelerate and a launch config.

A SLURM job from the sweep launcher (hydra-submitit-launcher) is one process holding all the GPUs the
job asked for. With `launch.processes=<n>` (conf/local/example.yaml sets it next to `gpus_per_node`) that
process starts the run again as `accelerate launch --config_file experiments/cluster/accelerate/<sharding>.yaml
--num_processes <n> run.py <the same overrides> hydra.run.dir=<this job's directory>` and waits for it; the
ranks then find the launch in their environment (WORLD_SIZE, and the sharding from the config file). A
requeued job starts them again, and they resume from the last complete round.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from seal.errors import Interrupted, UserError

ROOT = Path(__file__).resolve().parents[2]
ACCELERATE_CONFIGS = ROOT / "experiments" / "cluster" / "accelerate"
# the tasks that train, and so may take several processes
DISTRIBUTED_TASKS = ("train", "sanity")


def processes_wanted(value: Any) -> int:
    """`launch.processes` as a number of processes (null: the launch's own, one unless a launcher started more)."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"launch.processes={value!r}: give a number of processes per node (one per GPU), or null")
    return value


def launch_command(*, processes: int, sharding: str, overrides: list[str], out_dir: Path, gpus: int,
                   dtype: str) -> list[str]:
    """The accelerate command that runs this job on `processes` ranks with the sharding's launch config, in the
    mixed precision of the backbone's compute `dtype` (on a GPU and on the CPU's gloo ranks alike: the launch
    config's bf16 is the paper backbones', and a float32 backbone runs without mixed precision)."""
    from seal.rl.sharding import mixed_precision

    if sharding not in ("ddp", "fsdp2"):
        raise UserError(f"launch.sharding={sharding!r}: a launch of several processes takes ddp or fsdp2")
    if gpus and processes > gpus:
        raise UserError(
            f"launch.processes={processes} but this job has {gpus} GPU(s): ask the launcher for {processes} GPUs "
            f"(hydra.launcher.gpus_per_node={processes}) or set launch.processes={gpus}"
        )
    config = ACCELERATE_CONFIGS / f"{sharding}.yaml"
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(config),
               "--num_processes", str(processes), "--main_process_port", str(_free_port()),
               "--mixed_precision", mixed_precision(dtype)]
    kept = [o for o in overrides if not o.startswith(("hydra.run.dir=", "launch.processes="))]
    return [*command, str(ROOT / "run.py"), *kept, "launch.processes=null", f"hydra.run.dir={out_dir}"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def relaunch(cfg: Any, out_dir: Path) -> bool:
    """Run this job on launch.processes ranks when it asks for several and is not one of them yet; returns
    whether it did (the caller then has nothing left to do)."""
    from seal.rl.sharding import requested, resolve, under_a_launcher

    wanted = cfg.launch.get("processes")
    processes = processes_wanted(wanted)
    # one rank is launched too when it shards (FSDP2 needs the process group a launch gives)
    alone = processes == 1 and not (wanted is not None and requested(cfg.launch.sharding) == "fsdp2")
    if cfg.task not in DISTRIBUTED_TASKS or alone or under_a_launcher() or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return False
    from hydra.core.hydra_config import HydraConfig

    from seal.rl.distributed import cuda_devices

    # checked as the ranks will check it (a single rank launched here is an FSDP2 one)
    sharding = resolve(cfg.launch.sharding, processes) if processes > 1 else "fsdp2"
    gpus = cuda_devices()
    command = launch_command(processes=processes, sharding=sharding, overrides=list(HydraConfig.get().overrides.task),
                             out_dir=out_dir, gpus=gpus, dtype=cfg.backbone.dtype)
    out_dir.mkdir(parents=True, exist_ok=True)
    ranks = subprocess.Popen(command, cwd=ROOT)
    try:
        code = ranks.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the ranks too: the main rank says what was kept; wait for it instead of killing it
        try:
            ranks.wait(timeout=120)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            ranks.kill()
        raise Interrupted("") from None
    if code != 0:
        raise UserError(f"the {processes}-process launch of this job exited with code {code}; its error is above "
                        f"and in {out_dir / 'run.log'}")
    return True

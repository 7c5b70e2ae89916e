"""Real ranks inside a test: fresh CPU processes given torchrun's environment, so that
seal.rl.distributed.current() joins them into one gloo process group."""

import os
import socket

import torch.multiprocessing as mp


def run_ranks(fn, world: int, *args) -> None:
    """fn(rank, *args) in `world` processes of one launch; raises when any of them fails (the others are
    then stopped, so a rank left waiting in a collective cannot hang the test)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_as_rank, args=(world, port, fn, args), nprocs=world, join=True)


def _as_rank(rank: int, world: int, port: int, fn, args) -> None:
    os.environ.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1",
    })
    try:
        fn(rank, *args)
    finally:
        import torch.distributed

        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    leave_without_teardown()


def leave_without_teardown() -> None:
    """End a rank that finished its work with exit code 0 and without the interpreter's teardown: on a
    loaded machine a rank's C++ threads (gloo's, the rendezvous store's) were sometimes still joinable
    when the static destructors ran, and libstdc++ aborted the finished process ("terminate called
    without an active exception"). A rank that failed never gets here: its exception reaches mp.spawn."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

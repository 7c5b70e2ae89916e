"""`make bench`: speed and memory figures, printed (never asserted).

    python -m experiments.bench                 # every section
    python -m experiments.bench executor        # one section
    python -m experiments.bench --help          # the sections, each in one line
    python -m experiments.bench throughput --backbone tiny-random      # sections that load a model take
    python -m experiments.bench throughput backbone=tiny-random        # Hydra-style overrides

Sections are plain functions registered in SECTIONS; each prints its own table.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

SECTIONS: dict[str, Callable[[], None]] = {}


def section(fn: Callable[[], None]) -> Callable[[], None]:
    SECTIONS[fn.__name__] = fn
    return fn


@section
def executor() -> None:
    """The project's executor against bfcl-eval's official one, on the same 4,625 gold calls."""
    from seal.env.benchmarks.bfcl_v3 import load_benchmark
    from seal.env.entry import prepare_bfcl_import
    from seal.env.calls import parse_call
    from seal.env.executor import Backends, execute

    prepare_bfcl_import()
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils as official

    entries = list(load_benchmark().values())
    n_calls = sum(len(turn) for e in entries for turn in e.gold)

    def ours(parse_each_time: bool) -> tuple[float, float]:
        build = run = 0.0
        for e in entries:
            t0 = time.perf_counter()
            backends = Backends(e.involved_classes, e.initial_config, e.long_context)
            calls = [c for turn in e.gold for c in turn]
            if not parse_each_time:
                calls = [parse_call(c) for c in calls]
            t1 = time.perf_counter()
            for call in calls:
                execute(backends, call)
            build, run = build + t1 - t0, run + time.perf_counter() - t1
        return build, run

    def theirs(tag: str) -> tuple[float, float]:
        build = run = 0.0
        for e in entries:
            args = dict(initial_config=e.initial_config, involved_classes=e.involved_classes,
                        model_name=f"bench_{tag}", test_entry_id=e.id, long_context=e.long_context)
            t0 = time.perf_counter()
            official.execute_multi_turn_func_call([], **args)  # builds and caches the instances
            t1 = time.perf_counter()
            for turn in e.gold:
                official.execute_multi_turn_func_call(list(turn), **args)
            build, run = build + t1 - t0, run + time.perf_counter() - t1
        return build, run

    rows = []
    for name, fn in [("seal (parse + dispatch)", lambda: ours(True)), ("seal (pre-parsed calls)", lambda: ours(False)),
                     ("official (regex + eval)", lambda: theirs(str(time.time_ns())))]:
        fn()  # warm-up: imports, caches
        build, run = min((fn() for _ in range(3)), key=lambda r: r[1])
        rows.append((name, n_calls / run, n_calls / (build + run), build))
    base = rows[-1][1]
    print(f"\n## executor: {n_calls} gold calls of 800 entries, best of 3 (2-core CPU)")
    print(f"{'executor':28} {'calls/s':>10} {'calls/s incl. setup':>20} {'setup s':>8} {'vs official':>11}")
    for name, rate, total_rate, build in rows:
        print(f"{name:28} {rate:10.0f} {total_rate:20.0f} {build:8.2f} {rate / base:10.2f}x")


from experiments.measure.memory import memory  # noqa: E402
from experiments.measure.rollout import rollout, throughput  # noqa: E402

section(throughput)
section(rollout)
# the sections that load the configured backbone take the command line's Hydra overrides
OVERRIDABLE = {"throughput", "rollout"}
section(memory)

from experiments.measure.vllm_engine import vllm  # noqa: E402

section(vllm)


@section
def main_job() -> None:
    """`python run.py` as `make run` runs it: wall time, peak memory and a round's time split."""
    import json
    import resource
    import subprocess
    import tempfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "run.py", "logger.mode=offline", f"hydra.run.dir={out}"],
                              cwd=root, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            print(proc.stderr[-3000:])
            raise SystemExit(f"python run.py failed with exit code {proc.returncode}")
        peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2  # KiB on Linux
        metrics = json.loads((out / "metrics.json").read_text())
        plan = json.loads((out / "run_config.json").read_text())["training_memory_gib"]
        checkpoint = max((out / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        history = json.loads((checkpoint / "seal_state.json").read_text())["history"]
    split = metrics["round_time_split"]
    total = sum(split.values())
    print(f"\n## main job: `python run.py` (defaults), {metrics['rounds']} rounds, 2-core CPU")
    print(f"wall time {wall / 60:.1f} min (goal < 10), peak resident memory {peak_gib:.2f} GiB = {peak_gib * 1.073741824:.2f} GB (goal < 8 GB)")
    # the run's own memory plan (seal.policy.memory: the large tensors only) beside what the process peaked at
    print(f"memory plan of the run (run_config.json): {plan['total']:.2f} GiB estimated against {peak_gib:.2f} GiB "
          f"measured peak (the process also holds Python, the libraries, the tokenizer and the benchmark)")
    print(f"\n{'part of a round (mean)':28} {'seconds':>9} {'share':>7}")
    for part, seconds in split.items():
        print(f"{part:28} {seconds:9.2f} {seconds / total:7.1%}")
    bookkeeping = sum(split.get(k, 0.0) for k in ("verification", "diagnosis", "interface", "weighting"))
    print(f"{'verification+diagnosis+interface+weighting':44} {bookkeeping / total:7.2%} of a round (goal < 5%)")
    padded, trimmed = padding_cost(history)
    print(f"\ntoken columns scored per round by the old-logprob, reference and training passes (micro-batch 1): "
          f"{padded} padded to the round's longest, {trimmed} trimmed per micro-batch ({1 - trimmed / padded:.0%} saved)")


def padding_cost(history: list[dict]) -> tuple[int, int]:
    """Columns the three scoring passes cover when every episode of a round is padded to the round's longest
    prompt plus longest completion (TRL's layout), and when each micro-batch of one is cut to its own length."""
    padded = trimmed = 0
    for record in history:
        episodes = record["episodes"]
        longest_prompt = max(e["prompt_tokens"] for e in episodes)
        longest_completion = max(e["episode_tokens"] - e["prompt_tokens"] for e in episodes)
        padded += len(episodes) * (longest_prompt + longest_completion)
        trimmed += sum(e["episode_tokens"] for e in episodes)
    return padded, trimmed


def usage() -> str:
    """The module's usage and every section with the first line of its docstring."""
    lines = [(fn.__doc__ or "").strip().splitlines() for fn in SECTIONS.values()]
    width = max(map(len, SECTIONS))
    return __doc__.rstrip() + "\n\nSections:\n" + "\n".join(
        f"  {name:{width}}  {doc[0] if doc else ''}".rstrip() for name, doc in zip(SECTIONS, lines))


def main(argv: list[str]) -> None:
    argv = list(argv)
    if {"-h", "--help"} & set(argv):
        print(usage())
        return
    while "--backbone" in argv:
        at = argv.index("--backbone")
        if at + 1 == len(argv):
            sys.exit("--backbone needs a name: --backbone tiny-random")
        argv[at : at + 2] = [f"backbone={argv[at + 1]}"]
    overrides = [a for a in argv if "=" in a]
    chosen = [a for a in argv if "=" not in a] or list(SECTIONS)
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        sys.exit(f"unknown bench section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    if overrides and not OVERRIDABLE & set(chosen):
        sys.exit(f"overrides apply to the sections {', '.join(sorted(OVERRIDABLE))} only")
    for name in chosen:
        SECTIONS[name](overrides) if name in OVERRIDABLE else SECTIONS[name]()


if __name__ == "__main__":
    main(sys.argv[1:])

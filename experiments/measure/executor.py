"""make bench's executor section: the project's tool-call executor against bfcl-eval's official one.

    python -m experiments.bench executor
"""

from __future__ import annotations

import time


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

    # calls handed over as data (ToolCall objects, as the tool formats decode them) are still written out and
    # parsed back once inside execute, so that a call fails as its recorded text would: no faster than text
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
    for name, fn in [("seal (parse + dispatch)", lambda: ours(True)), ("seal (calls as data)", lambda: ours(False)),
                     ("official (regex + eval)", lambda: theirs(str(time.time_ns())))]:
        fn()  # warm-up: imports, caches
        build, run = min((fn() for _ in range(3)), key=lambda r: r[1])
        rows.append((name, n_calls / run, n_calls / (build + run), build))
    base = rows[-1][1]
    print(f"\n## executor: {n_calls} gold calls of 800 entries, best of 3 (2-core CPU)")
    print(f"{'executor':28} {'calls/s':>10} {'calls/s incl. setup':>20} {'setup s':>8} {'vs official':>11}")
    for name, rate, total_rate, build in rows:
        print(f"{name:28} {rate:10.0f} {total_rate:20.0f} {build:8.2f} {rate / base:10.2f}x")

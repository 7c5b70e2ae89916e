"""`make bench`: speed and memory figures, printed (never asserted).

    python -m experiments.bench                 # every section
    python -m experiments.bench executor        # one section
    python -m experiments.bench --help          # the sections, each in one line
    python -m experiments.bench throughput --backbone tiny-random      # sections that load a model take
    python -m experiments.bench throughput backbone=tiny-random        # Hydra-style overrides

Sections are plain functions of experiments/measure/, named in SECTIONS; each prints its own table.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from experiments.measure.executor import executor
from experiments.measure.main_job import main_job
from experiments.measure.memory import memory, memory_measured
from experiments.measure.rollout import rollout, throughput
from experiments.measure.vllm_engine import vllm

# the sections in the order a run of every section takes them, each a function of experiments/measure/
SECTIONS: dict[str, Callable[..., None]] = {
    fn.__name__: fn for fn in (executor, throughput, rollout, memory, memory_measured, vllm, main_job)}
# the sections that load the configured backbone take the command line's Hydra overrides
OVERRIDABLE = {"throughput", "rollout"}


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

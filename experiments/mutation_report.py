"""Score of the last `mutmut run` per module, and the mutants the tests let through (`make mutate`).

Reads mutmut's result files (mutants/**/*.py.meta) and its own exit-code table. A module's score is
killed / (mutants - equivalent), where killed counts mutants a test failed on, timed out or that
broke the import; equivalent mutants are listed with a reason in experiments/equivalent_mutants.txt
("<mutant key>  <reason>" per line). Prints one row per module, then every surviving or untested
mutant (`mutmut show <key>` prints its diff). Exit code 1 when a module is under the goal.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

GOAL = 0.90
KILLED = {"killed", "timeout", "caught by type check", "segfault"}
REPO = Path(__file__).resolve().parents[1]


def equivalent(path: Path) -> dict[str, str]:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, reason = line.partition(" ")
                out[key] = reason.strip()
    return out


def collect(mutants: Path) -> dict[str, dict[str, str]]:
    """{module: {mutant key: status}} from mutmut's result files."""
    from mutmut.stats import status_by_exit_code

    by_module: dict[str, dict[str, str]] = defaultdict(dict)
    for meta in sorted(mutants.rglob("*.py.meta")):
        module = meta.relative_to(mutants).as_posix()[: -len(".meta")]
        for key, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            by_module[module][key] = status_by_exit_code[code]
    return by_module


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=Path, default=REPO / "mutants")
    ap.add_argument("--equivalent", type=Path, default=REPO / "experiments" / "equivalent_mutants.txt")
    args = ap.parse_args(argv)
    by_module = collect(args.mutants)
    if not by_module:
        print(f"no mutmut results under {args.mutants}: run `make mutate`", file=sys.stderr)
        return 2
    eq = equivalent(args.equivalent)
    rows, left, under = [], [], []
    for module, statuses in sorted(by_module.items()):
        checked = {k: s for k, s in statuses.items() if s != "not checked"}
        if not checked:
            continue  # outside this run's MUTANTS selection
        # a listed key whose mutant was killed is stale (reported below) and counts as killed
        counted = {k: s for k, s in checked.items() if k not in eq or s in KILLED}
        killed = sum(s in KILLED for s in counted.values())
        score = killed / len(counted) if counted else 1.0
        rows.append((module, len(checked), killed, len(checked) - len(counted), score))
        left += [(k, s) for k, s in counted.items() if s not in KILLED]
        if score < GOAL:
            under.append(module)
    if not rows:
        print("no mutant was checked in the last run", file=sys.stderr)
        return 2
    print("| module | mutants checked | killed | equivalent | score |")
    print("|---|---|---|---|---|")
    for module, n, killed, n_eq, score in rows:
        print(f"| {module} | {n} | {killed} | {n_eq} | {score:.1%} |")
    scored = sum(r[1] - r[3] for r in rows)
    print(f"| all | {sum(r[1] for r in rows)} | {sum(r[2] for r in rows)} | {sum(r[3] for r in rows)} | "
          f"{sum(r[2] for r in rows) / scored if scored else 1.0:.1%} |")
    print(f"\n{len(left)} mutants not killed (`mutmut show <key>` prints one):")
    for key, status in left:
        print(f"  {status:10s} {key}")
    # a listed key that names a killed mutant is stale (mutmut renumbered the function's mutants): it would
    # take a mutant out of the score that a test kills
    stale = sorted(k for statuses in by_module.values() for k, s in statuses.items() if k in eq and s in KILLED)
    if stale:
        print(f"\n{len(stale)} keys in {args.equivalent.name} name killed mutants (renumbered; list the survivors' "
              "keys instead):")
        for key in stale:
            print(f"  {key}")
    if under:
        print(f"\nunder the {GOAL:.0%} goal: {', '.join(under)}")
    return 1 if under or stale else 0


if __name__ == "__main__":
    sys.exit(main())

"""`make mutate`: mutation testing (mutmut 3) one named group of modules at a time, each with its own tests.

pyproject's [tool.mutmut] holds what every group shares (the source paths, the files to copy, the timeout,
the pytest marker that keeps costly tests out); [tool.mutmut.groups.<name>] holds a group's modules
(`only_mutate`), the tests that target them (`tests`: pytest arguments, `--deselect` included) and, for a
module only partly in the run, the functions mutated (`functions`: mutant-name globs; a module that no glob
names is mutated whole). mutmut reads one configuration per process, so each group runs in a child process
that sets it before mutmut starts; mutmut writes to mutants/ (a fixed place), and the report scores each group
right after its run, so the last group's results stay there for `mutmut show <key>`.

    python -m tests.tools.mutate                    every group, in order; exit 1 if any module is under the goal
    python -m tests.tools.mutate --group env        one group (a comma-separated list runs several)
    python -m tests.tools.mutate --group env 'seal.env.protocol.*'   only these mutants of the group
    python -m tests.tools.mutate 'seal.rl.reweighting.*'            the groups that hold these mutants
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from tests.tools import mutation_report

REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Group:
    name: str
    only_mutate: list[str]
    tests: list[str]
    functions: list[str]

    def mutant_globs(self) -> list[str]:
        """The mutant-name globs the run is limited to: the named functions, and every mutant of the other
        modules."""
        modules = [module_of(path) for path in self.only_mutate]
        named = {m for m in modules if any(g.startswith(m + ".x") for g in self.functions)}
        return list(self.functions) + [f"{m}.*" for m in modules if m not in named]

    def holds(self, globs: list[str]) -> bool:
        """Whether any of these mutant-name globs can name a mutant of this group's modules."""
        modules = [module_of(path) + "." for path in self.only_mutate]
        heads = [re.split(r"[*?\[]", g)[0] for g in globs]
        return any(m.startswith(h) or h.startswith(m) for m in modules for h in heads)


def module_of(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def groups(pyproject: Path = REPO / "pyproject.toml") -> dict[str, Group]:
    table = tomllib.loads(pyproject.read_text())["tool"]["mutmut"]["groups"]
    return {name: Group(name, g["only_mutate"], g["tests"], g.get("functions", [])) for name, g in table.items()}


def run_child(group: Group, mutants: list[str], max_children: int) -> None:
    """mutmut's run with the group's modules and tests (runs in the child process, from the repository root)."""
    import mutmut.configuration as mutmut_config

    # this process imported the tests package (this module) and the experiments package from the repository:
    # forget both, so that the tests import them from mutants/, where the mutated modules are
    for name in [m for m in sys.modules if m.split(".")[0] in ("experiments", "tests")]:
        del sys.modules[name]
    base = mutmut_config._load_config()
    mutmut_config._config = dataclasses.replace(
        base, only_mutate=group.only_mutate,
        pytest_add_cli_args_test_selection=base.pytest_add_cli_args_test_selection + group.tests)
    from mutmut.__main__ import _run

    _run(mutants or group.mutant_globs(), max_children)


def run_group(group: Group, mutants: list[str], max_children: int) -> tuple[int, float, list]:
    """One group's mutmut run and report: (exit code, wall seconds, report rows)."""
    shutil.rmtree(REPO / "mutants", ignore_errors=True)
    log = REPO / f"mutants.{group.name}.log"
    start = time.monotonic()
    # one thread per torch: mutmut forks each mutant's run from a process that already ran the tests, and a
    # forked child whose parent started torch's OpenMP pool hangs in its first parallel op
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "tests.tools.mutate", "--child", group.name, "--max-children", str(max_children),
           *mutants]
    with log.open("w") as out:
        code = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.monotonic() - start
    print(f"\n## group {group.name}: {', '.join(group.only_mutate)} ({wall / 60:.1f} min, log {log.name})\n")
    if code != 0:
        print("".join(log.read_text().splitlines(keepends=True)[-20:]))
        print(f"mutmut stopped with exit code {code}")
        return 1, wall, []
    report = mutation_report.score(REPO / "mutants", REPO / "tests" / "tools" / "equivalent_mutants.txt")
    mutation_report.print_report(report)
    return (1 if report.failed else 0), wall, report.rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--group", help="group names, comma-separated (default: every group)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--max-children", type=int, default=2)
    ap.add_argument("mutants", nargs="*", help="mutmut mutant-name globs within the group(s)")
    args = ap.parse_args(argv)
    known = groups()
    if args.child:
        run_child(known[args.child], args.mutants, args.max_children)
        return 0
    names = args.group.split(",") if args.group else [n for n in known if not args.mutants or known[n].holds(args.mutants)]
    unknown = [n for n in names if n not in known]
    if unknown:
        print(f"unknown group {', '.join(unknown)}: choose from {', '.join(known)}", file=sys.stderr)
        return 2
    status, summary, total = 0, [], time.monotonic()
    for name in names:
        code, wall, rows = run_group(known[name], args.mutants, args.max_children)
        status |= code
        summary.append((name, wall, rows, code))
    if len(names) > 1:
        print(f"\n## every group ({(time.monotonic() - total) / 60:.1f} min)\n")
        print("| group | module | mutants checked | killed | equivalent | score | group wall time |")
        print("|---|---|---|---|---|---|---|")
        for name, wall, rows, code in summary:
            for module, n, killed, n_eq, score in rows or [("(mutmut failed)", 0, 0, 0, 0.0)]:
                print(f"| {name} | {module} | {n} | {killed} | {n_eq} | {score:.1%} | {wall / 60:.1f} min |")
    return status


if __name__ == "__main__":
    sys.exit(main())

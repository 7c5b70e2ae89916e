"""What the episode, the scripted oracle and the evaluation ask of a benchmark, and the registry of
benchmarks by name (conf/benchmark/<name>.yaml instantiates one; an entry names its own).

A benchmark is one module under seal/env/benchmarks/ with a subclass of `Benchmark` registered under
its name; nothing else branches on which benchmark an entry comes from."""

from __future__ import annotations

from typing import Any, ClassVar

from seal.env.entry import Entry
from seal.env.verifier import CONTEXT_OVERFLOW, TurnCheck, Verdict
from seal.errors import UserError

# What the scripted oracle says when it has no (more) calls to make in a turn.
ORACLE_REPLY = "I have completed the requested operations."

REGISTRY: dict[str, type[Benchmark]] = {}
_INSTANCES: dict[type, Benchmark] = {}


def register(name: str):
    """Class decorator: the benchmark `name` (entries' `benchmark` field, metrics' eval/<name>/...)."""
    def add(cls: type[Benchmark]) -> type[Benchmark]:
        cls.name = name
        REGISTRY[name] = cls
        return cls
    return add


def benchmark_of(entry: Entry) -> Benchmark:
    """The benchmark that plays and checks `entry` (its per-entry rules need no configuration)."""
    cls = REGISTRY[entry.benchmark]
    if cls not in _INSTANCES:
        _INSTANCES[cls] = cls()
    return _INSTANCES[cls]


class Benchmark:
    """The defaults are BFCL V3 multi-turn's protocol: turns as the entry gives them, any number of
    steps per turn, nothing done when the episode ends, the gold replay as the oracle's script."""

    name: ClassVar[str] = ""
    # every category, in the benchmark's order (a configuration may select some)
    CATEGORIES: ClassVar[tuple[str, ...]] = ()
    # the entries are the run's split (split=..., eval_part=...; seal.evaluation.evaluate) rather than categories
    # played whole (seal.evaluation.out_of_domain): true of the benchmark SEAL trains on
    from_split: ClassVar[bool] = False

    def __init__(self, name: str | None = None, categories: list[str] | None = None):
        if name is not None and name != self.name:
            raise UserError(f"benchmark.name={name}: this benchmark's class is registered as {self.name}")
        chosen = list(self.CATEGORIES if categories is None else categories)
        wrong = [c for c in chosen if c not in self.CATEGORIES]
        if wrong or not chosen:
            raise UserError(f"benchmark.categories={chosen}: choose among {', '.join(self.CATEGORIES)}")
        self.categories = chosen

    @property
    def metric_prefix(self) -> str:
        return f"eval/{self.name}"

    def prepare(self) -> None:
        """Check (and load) what the benchmark needs before a model is loaded; UserError if missing."""

    def entries(self, category: str, files_dir: Any = None) -> list[Entry]:
        """Every entry of `category` in the benchmark's order (`files_dir`: where this run's episodes may
        keep files, e.g. memory snapshots)."""
        raise NotImplementedError

    def task_set(self) -> dict[str, Any]:
        """What an evaluation's metrics record of the task set it played, beside its counts: a benchmark with
        task splits of its own names the split and the tasks of each category in it (tau2); {} otherwise."""
        return {}

    def select(self, entries: list[Entry], n: int | None) -> tuple[list[Entry], list[Entry]]:
        """(prerequisite conversations, scored entries) for the first `n` scored entries (None: all)."""
        return [], entries if n is None else entries[: max(int(n), 0)]

    def prerequisite_groups(self, prerequisites: list[Entry]) -> dict[Any, list[Entry]]:
        """The prerequisites by group, each group in the order it must be played (one after the other,
        on one rank); groups are independent."""
        return {}

    # --------------------------------------------------------------------------------- the episode

    def turns(self, entry: Entry, backends: Any) -> list[list[dict[str, str]]]:
        """The turns' messages as an episode delivers them (e.g. instructions in the first system message)."""
        return entry.turns

    def next_messages(self, episode: Any) -> list[dict[str, str]] | None:
        """The messages of the turn after the last one `episode.turns` holds (a conversation whose next user
        message depends on the replies so far), or None: the episode is complete. The default: the
        entry's turns are all there is. It may end the episode itself (`episode.abort`)."""
        return None

    def backends(self, entry: Entry) -> Any:
        """The live tools of one episode (default: bfcl-eval's backend classes the entry involves)."""
        from seal.env.executor import Backends

        return Backends(entry.involved_classes, entry.initial_config, entry.long_context)

    def execute(self, backends: Any, call: Any) -> Any:
        """Run one decoded call against `backends`; a CallRecord, never an exception."""
        from seal.env.executor import execute

        return execute(backends, call)

    def ends_episode(self, backends: Any, calls: list[Any]) -> bool:
        """Whether an output's calls end the episode instead of running (tau2's solo `done`: none of them run)."""
        return False

    def check_run(self, records: list[dict[str, Any]]) -> None:
        """After an evaluation has written every played record: UserError if the run must not be
        reported (e.g. its user simulator failed on some entries); nothing already written is lost."""

    def single_reply(self, entry: Entry) -> bool:
        """Whether the entry takes exactly one reply, whose calls are recorded but never executed."""
        return False

    def end(self, entry: Entry, backends: Any) -> None:
        """What happens when an episode ends, however it ended (e.g. a memory flushed to disk)."""

    def verdict(self, episode: Any) -> Verdict:
        """The official verdict of a played episode (seal.env.episode.Episode)."""
        raise NotImplementedError

    def oracle_message(self, episode: Any, entry: Entry, fmt: Any) -> str | None:
        """The scripted oracle's next message, in tool format `fmt`; None: replay the turn's gold calls."""
        return None


def one_turn_verdict(entry: Entry, valid: bool, error: str | None = None, message: str = "") -> Verdict:
    """The verdict of an entry checked as a whole, as one turn (`error`, `message`: why it failed)."""
    if valid:
        return Verdict(entry.id, True, None, "", None, [TurnCheck(0, gold_empty=False, status="pass")])
    return Verdict(entry.id, False, error, message, 0, [TurnCheck(0, gold_empty=False, status=error)])


def overflow_verdict(entry: Entry) -> Verdict:
    return one_turn_verdict(entry, False, CONTEXT_OVERFLOW, "the episode outgrew the backbone's context window")

"""BFCL V4 memory (out of domain; the paper's Table 2 with web search), on the kv, rec_sum and vector
backends.

Each scenario's prerequisite conversations are played first, in order, by the model under evaluation;
the memory it writes is flushed to a snapshot (in the run's folder) that every question of the scenario
starts from, with bfcl-eval's memory system message and core memory in front of its first turn. Only the
questions are scored, by the agentic check."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from seal.env.entry import Entry, prepare_bfcl_import
from seal.env.benchmarks.agentic import Agentic, agentic_reply, unescaped
from seal.env.benchmarks.base import ORACLE_REPLY, register
from seal.env.benchmarks.bfcl_eval_data import load_entries, raw_category
from seal.env.calls import parse_call
from seal.errors import UserError

MEMORY_BACKENDS = ("kv", "rec_sum", "vector")

# the memory calls with which the oracle files an answer and reads it back, per memory backend
_MEMORY_WRITE = {"kv": "archival_memory_add(key={key!r}, value={text!r})", "vector": "archival_memory_add(text={text!r})",
                 "rec_sum": "memory_append(text={text!r})"}
_MEMORY_READ = {"kv": "archival_memory_retrieve(key={key!r})", "vector": "archival_memory_retrieve_all()",
                "rec_sum": "memory_retrieve()"}


def is_prereq(entry: Entry) -> bool:
    """A memory prerequisite conversation: played to fill the memory, never scored."""
    return "_prereq_" in entry.id


def memory_scenario(entry: Entry) -> str:
    return entry.initial_config[entry.involved_classes[0]]["scenario"]


def memory_answer_key(entry_id: str) -> str:
    """The snake_case key the scripted oracle files a memory question's answer under (q_<number>)."""
    return "q_" + entry_id.rpartition("-")[2]


def scenario_answers(category: str, scenario: str) -> dict[str, str]:
    """A memory scenario's questions as {answer key: first acceptable answer} (the scripted oracle's
    knowledge; no model sees it)."""
    raw, answers = raw_category(category, "memory")
    out = {}
    for item in raw:
        if "_prereq_" not in item["id"] and item.get("scenario") == scenario:
            out[memory_answer_key(item["id"])] = answers[item["id"]][0]
    return out


@register("bfcl_v4_memory")
class BFCLV4Memory(Agentic):
    CATEGORIES = tuple(f"memory_{b}" for b in MEMORY_BACKENDS)

    def __init__(self, name: str | None = None, memory_backends: list[str] | None = None,
                 encoder_path: str | None = None):
        backends = list(MEMORY_BACKENDS if memory_backends is None else memory_backends)
        wrong = [b for b in backends if b not in MEMORY_BACKENDS]
        if wrong or not backends:
            raise UserError(f"benchmark.memory_backends={backends}: choose among {', '.join(MEMORY_BACKENDS)}")
        super().__init__(name, [f"memory_{b}" for b in backends])
        self.encoder_path = encoder_path

    def prepare(self) -> None:
        """The vector memory's encoder is loaded now, so that a missing one stops the run at once."""
        if "memory_vector" in self.categories:
            from seal.env.vector_memory import use_encoder, vector_memory_class

            use_encoder(self.encoder_path)
            vector_memory_class()

    def entries(self, category: str, files_dir: Any = None) -> list[Entry]:
        """Prerequisites first; the entries keep their snapshots under `files_dir` (one folder per run:
        the prerequisite conversations write there and the questions read from there)."""
        if files_dir is None:
            raise ValueError("memory categories need a directory for their memory snapshots")

        def config(item: dict[str, Any]) -> dict[str, Any]:
            return {item["involved_classes"][0]: {"model_result_dir": Path(files_dir), "scenario": item["scenario"],
                                                  "test_id": item["id"], "test_category": category}}

        return load_entries(self.name, category, "memory", "agentic", config)

    def select(self, entries: list[Entry], n: int | None) -> tuple[list[Entry], list[Entry]]:
        """The first `n` questions, with the prerequisite conversations of their scenarios only."""
        _, questions = super().select([e for e in entries if not is_prereq(e)], n)
        scenarios = {memory_scenario(e) for e in questions}
        return [e for e in entries if is_prereq(e) and memory_scenario(e) in scenarios], questions

    def prerequisite_groups(self, prerequisites: list[Entry]) -> dict[Any, list[Entry]]:
        """By scenario: each conversation starts from the memory the previous one of its scenario left."""
        groups: dict[Any, list[Entry]] = {}
        for entry in prerequisites:
            groups.setdefault(memory_scenario(entry), []).append(entry)
        return groups

    def turns(self, entry: Entry, backends: Any) -> list[list[dict[str, str]]]:
        """bfcl-eval's memory system message (the backend's instructions and the core memory this episode
        starts with) in front of the first turn."""
        prepare_bfcl_import()
        from bfcl_eval.model_handler.utils import add_memory_instruction_system_prompt

        instance = next(iter(backends.instances.values()))
        return add_memory_instruction_system_prompt(json.loads(json.dumps(entry.turns)), entry.category,
                                                    memory_scenario(entry), instance)

    def end(self, entry: Entry, backends: Any) -> None:
        if is_prereq(entry):
            # as bfcl-eval does, however the conversation ended: the next one of the scenario starts here
            next(iter(backends.instances.values()))._flush_memory_to_local_file()

    def oracle_message(self, episode: Any, entry: Entry, fmt: Any) -> str:
        """The first prerequisite conversation of a scenario files every question's answer in the memory
        backend (the later ones just reply); a question reads its answer back and gives it only if the
        memory returned it."""
        steps, docs = episode.steps[-1], entry.docs_by_name()
        backend = entry.category[len("memory_"):]
        if is_prereq(entry):
            if entry.id.endswith("-0") and episode.turn == 0 and not steps:
                answers = scenario_answers(entry.category, memory_scenario(entry))
                calls = [_MEMORY_WRITE[backend].format(key=k, text=f"{k}: {a}|") for k, a in answers.items()]
                return fmt.render_calls([parse_call(c) for c in calls], docs)
            return ORACLE_REPLY
        key = memory_answer_key(entry.id)
        if not steps:
            return fmt.render_calls([parse_call(_MEMORY_READ[backend].format(key=key))], docs)
        found = re.search(re.escape(key) + r": (.*?)\|", unescaped(steps[-1].calls[0].observation))
        return agentic_reply(found.group(1) if found else "I do not know")

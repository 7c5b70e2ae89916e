"""The executable core: BFCL V3 multi-turn data, safe execution, episodes and official verification."""

from seal.env.benchmarks.bfcl_v3 import CATEGORIES, load_benchmark
from seal.env.entry import Entry
from seal.env.calls import ToolCall, UnsafeCall, parse_call
from seal.env.episode import Episode
from seal.env.verifier import Verdict, verify

__all__ = [
    "CATEGORIES",
    "Entry",
    "Episode",
    "ToolCall",
    "UnsafeCall",
    "Verdict",
    "load_benchmark",
    "parse_call",
    "verify",
]

"""The benchmarks behind one interface (base.py), one module each, registered by name: BFCL V3
multi-turn, BFCL V4 memory, BFCL V4 web search, BFCL single turn, tau2-bench. conf/benchmark/<name>.yaml
instantiates one; an entry's `benchmark` field names the one that plays and checks it."""

from seal.env.benchmarks.base import (
    ORACLE_REPLY,
    REGISTRY,
    Benchmark,
    benchmark_of,
    one_turn_verdict,
    overflow_verdict,
    register,
)
# importing them registers them, in this order
from seal.env.benchmarks import bfcl_v3, bfcl_v4_memory, bfcl_v4_web_search, bfcl_single_turn, tau2  # noqa: F401,E402

__all__ = ["ORACLE_REPLY", "REGISTRY", "Benchmark", "benchmark_of", "one_turn_verdict", "overflow_verdict",
           "register"]

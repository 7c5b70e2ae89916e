"""What the tables hold: BFCL V3's columns, the two evaluation protocols, the models of a run, the arms
compared, the manifest's name and Table 2's sources. Every module of experiments.tables, and the cluster's
plan, read them from here."""

from __future__ import annotations

from seal.env.benchmarks.bfcl_v3 import CATEGORIES

COLUMNS = ("avg",) + CATEGORIES
# protocol: (metric prefix, trajectory file, what it is comparable to)
PROTOCOLS = {
    "release": ("eval/bfcl_v3_release", "trajectories_release.jsonl", "comparable to the paper (release protocol)"),
    "official": ("eval/bfcl_v3", "trajectories.jsonl", "comparable to the BFCL leaderboard (official protocol)"),
}
# model: (label, metrics.json key with a validation part, its evaluation folder, the same without one)
MODELS = {
    "initial": ("base model (initial)", "test_before", "eval_test_before", ("eval_before", "eval_before")),
    "final": ("final model", "test_final", "eval_test_final", ("eval_after", "eval_after")),
    "best_on_val": ("best on validation", "test_best_on_val", "eval_test_best", None),
    "test_selected": ("test-selected (diagnostic: chosen on test, optimistic)", "test_selected_diagnostic", None, None),
}
# each run's headline model: best on validation where the run validated, else final
HEADLINE = "headline"
HEADLINE_LABEL = "headline model (best on validation where the run validated, else final)"
MANIFEST = "manifest.json"
PAPER_BUDGET = "paper"
ABLATIONS = ("wo_env_adaptation", "wo_reweighting", "wo_closed_loop")
# Table 2's columns from the out-of-domain evaluations (metrics.json's ood_before/ood_after): column ->
# (benchmark, metric); bfcl_v4 is each run's mean of web search and memory
OOD_SOURCES = {"bfcl_v4_web_search": ("bfcl_v4_web_search", "avg"), "bfcl_v4_memory": ("bfcl_v4_memory", "avg"),
               "tau2": ("tau2", "avg"), "tau2_retail": ("tau2", "retail"), "tau2_airline": ("tau2", "airline"),
               "tau2_telecom": ("tau2", "telecom")}
BFCL_V4 = ("bfcl_v4_web_search", "bfcl_v4_memory")
TABLE2_HEADER = ("BFCL V4 Avg", "Web Search", "Memory", "tau2 Avg", "Retail", "Airline", "Telecom")


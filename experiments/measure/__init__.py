"""Measuring: `make bench` (experiments/bench.py) runs memory, rollout and vllm_engine's sections; the preflight
of a GPU node (`python -m experiments.gpu_check`) is in preflight/."""

"""Measuring: `make bench` (experiments/bench.py) runs the sections of executor, rollout, memory, vllm_engine and
main_job; the preflight of a GPU node (`python -m experiments.gpu_check`) is in preflight/."""

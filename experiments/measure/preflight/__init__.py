"""The preflight of a GPU node; `python -m experiments.gpu_check` is its command.

- steps: what every step shares (paths, the tiny shape, the runs' overrides, Step and Failure);
- model: the backbone's published shape built with random weights; the throughput step;
- runs: run.py in child processes under a peak-memory wrapper, and the checks of what they left;
- disk: the disk the preflight needs and each step's timeout;
- node: every step in order and the table.
"""

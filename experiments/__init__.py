"""Experiments with the method: each command here is its usage and its arguments, and its work is in a folder.

    python -m experiments.aggregate <root>     the paper's tables from runs          -> tables/
    python -m experiments.reproduce            the paper's jobs on a SLURM cluster   -> cluster/
    python -m experiments.gpu_check            the preflight of a GPU node           -> measure/preflight/
    make bench (python -m experiments.bench)   speed and memory figures              -> measure/

The project's own upkeep (make mutate, make docs) is in tests/tools/.
"""

"""Running the paper on a cluster; `python -m experiments.reproduce` is its command.

- jobs: the paper's jobs (backbone x arm x seed), their run directories and the manifest;
- needs: what each job needs of a cluster (GPUs, host memory, disk, hours, requeues);
- slurm: the partition's check, the confirmation, the submission and the wait;
- accelerate/: the launch configurations of launch=paper and launch=default (DDP);
- local_slurm.sh: a one-node SLURM cluster on this machine, for `make test-slurm`.
"""

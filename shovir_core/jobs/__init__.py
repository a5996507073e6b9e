"""Run the shards of records as jobs: local processes or a SLURM job array (through ``submitit``).

:class:`ShardTask` makes one shard of every record it is given (``protocols.run(..., shard=...)``);
:func:`submit` starts shard tasks with ``submitit`` (``executor="local"``: local processes, one per
GPU with ``CUDA_VISIBLE_DEVICES`` when several; ``"slurm"``: one job array, options from
:class:`ClusterOptions`); :func:`status` shows each record's per-shard progress from the records
themselves. A preempted or timed-out SLURM task is requeued through submitit's checkpoint hook and
resumes: records skip the trials already stored.
"""
from .options import ClusterOptions, load_cluster_options, parse_time
from .status import status
from .submit import JobFailure, submit, wait
from .task import RunTarget, ShardTask, targets_of

__all__ = ["ShardTask", "RunTarget", "targets_of", "ClusterOptions", "load_cluster_options", "parse_time",
           "submit", "wait", "JobFailure", "status"]

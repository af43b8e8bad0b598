"""A real Slurm cluster on one machine: munged, MariaDB, slurmdbd, slurmctld, N slurmd."""

from slurm_hetero.devcluster.cluster import Cluster, default_workdir

__all__ = ["Cluster", "default_workdir"]

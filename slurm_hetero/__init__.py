"""slurm-hetero: make Slurm schedule heterogeneous clusters well."""

__version__ = "0.1.0"

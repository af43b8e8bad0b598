"""slurm-hetero: make Slurm schedule heterogeneous clusters well."""

import os

# LightGBM's OpenMP threads sleep when they wait instead of spinning (libgomp reads this when
# it loads, so before any import of lightgbm): this code trains and predicts beside slurmctld
# or beside other workers, and spinning threads there starve the rest (two pytest workers
# each training on 2 cores took minutes instead of 2 s). A site's own setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

"""What-if replay of a workload trace on the real Slurm under an accelerated clock."""

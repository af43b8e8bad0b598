"""`python -m slurm_hetero.monitor node-exporter|cluster-exporter ...`: the exporters'
entry without loading the whole `slurm-hetero` CLI (node-side start-up stays light)."""

from slurm_hetero.monitor.cli import monitor

if __name__ == "__main__":
    monitor(prog_name="python -m slurm_hetero.monitor")

"""Demand forecast per pool for the next 5, 15 and 60 minutes.

What is forecast (`demand`): per pool — "model@arch" for accelerators, in normalized units
(devices times the model's units), "cpu@arch" for CPU-only jobs, in cores — the **peak, over the
next H minutes, of the amount held by jobs in the system** (running or pending). That is
what a power saver needs: a node may sleep only if no minute of the next H needs it, and a
sleeping node must be woken H ahead of the minute that does (ResumeTimeout ≈ 5 minutes).

Modules, lowest first: `demand` (job rows → minute series), `sources` (traces, sacct,
squeue → job rows), `features` (what a model sees at an origin), `models` (LightGBM and
the baselines), `evaluate` (time-ordered split, metrics), `live` (the bridge daemon's
per-minute refresh), `cli` (`slurm-hetero forecast`).
"""

HORIZONS: tuple[int, ...] = (5, 15, 60)  # minutes ahead

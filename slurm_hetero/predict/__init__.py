"""Runtime prediction over the job table (slurm_hetero.jobs): submit-time features,
baselines, LightGBM training, time-ordered evaluation and the Lua export the
job_submit.lua bridge loads."""

"""Runtime prediction: job table, submit-time features, baselines, LightGBM training,
time-ordered evaluation and the Lua export the job_submit.lua bridge loads."""

"""Power saving: Slurm's SuspendProgram/ResumeProgram and the keeper that decides which idle
nodes may sleep, from the demand forecast.

Slurm 22.05 cannot change SuspendExcNodes at run time (`scontrol update SuspendExcNodes=`
is refused: "No valid entity"), and a node its SuspendProgram leaves running while
slurmctld books it powered down comes back only if its slurmd restarts (a registration with
a new boot time). So Slurm never suspends on its own here (every partition has
SuspendTime=INFINITE; the global SuspendTime only switches power saving on); the keeper
(`keeper`, run by the bridge daemon) powers down the idle nodes the forecast does not need,
with `scontrol update nodename=... state=power_down`, and wakes ahead with `state=power_up`.
Slurm itself resumes a sleeping node a job is given (ResumeProgram). The SuspendProgram
checks the safety rules again (`rules`) and refuses what breaks one.

Modules, lowest first: `states` (parsers of scontrol output), `rules` (pure: pools, safety,
the keeper's plan), `methods` (ipmi, redfish, command, devcluster), `program` (what the
rendered Suspend/ResumeProgram run), `history` (the keeper's JSONL record per pool and round,
for the report), `published` (a forecast another process publishes for the daemon: replay's),
`keeper`, `cli`.
"""

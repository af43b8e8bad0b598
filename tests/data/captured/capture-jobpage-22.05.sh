#!/bin/sh
# Captures the job page's and the capacity report's Slurm 22.05 output from the dev cluster
# (the demo site), as `sacct-json-job*-22.05.json`, `squeue-json-jobpage-22.05.json`,
# `sacctmgr-event-22.05.txt` and `sacctmgr-reservation-22.05.txt` were made. As root:
#   sh capture-jobpage-22.05.sh OUTDIR
# Job ids 1-5 assume a fresh cluster (a new workdir).
set -eu
OUT=$1
W=/tmp/jobpage-capture
.venv/bin/slurm-hetero cluster up --workdir "$W" --timeout 180
export SLURM_CONF="$W/etc/slurm.conf"
scontrol update nodename=h100-01 state=drain reason="maint: fan | swap"
scontrol update nodename=cpu-arm-01 state=down reason="cable"
scontrol create reservation reservationname=maint1 starttime=now duration=00:00:20 nodes=v100-01 \
    flags=maint,ignore_jobs users=root
sbatch --parsable --accel=a100-80gb:2 --energy=efficiency -c 4 --mem=16G -t 30 -J jp-gpu -o /dev/null \
    --wrap 'srun python3 -c "import time; x = bytearray(300 << 20); t = time.time()
while time.time() - t < 4: pass"'
sbatch --parsable --gres=npu:1 -t 10 -J jp-run -o /dev/null --wrap 'sleep 200'
sbatch --parsable -H --gres=gpu:v100:1 -J jp-pend -o /dev/null --wrap true
sbatch --parsable -c 2 --mem=2G -t 5 -J jp-cpu -o /dev/null --wrap "timeout 3 sh -c 'while :; do :; done'; exit 0"
sleep 12
sbatch --parsable --gres=gpu:a100-80gb:1 --mem=4G -t 10 -J jp-mem -o /dev/null --wrap 'srun python3 -c "
import time
x = bytearray(400 << 20)
for i in range(0, len(x), 4096): x[i] = 1
time.sleep(36)"'
sleep 45  # past the 30 s JobAcctGatherFrequency sample, and the epilog's admin comment
for j in 1 2 3 4 5; do sacct --json -j $j > "$OUT/sacct-json-job$j-22.05.json"; done
sacct --json -j 999 > "$OUT/sacct-json-missing-22.05.json"
squeue --json > "$OUT/squeue-json-jobpage-22.05.json"
scontrol update nodename=h100-01 state=resume
scontrol update nodename=cpu-arm-01 state=resume || true  # ReturnToService may have done it
sleep 2
scontrol update nodename=npu-02 state=drain reason="xid 79"
sleep 2
day=$(date +%Y-%m-%dT00:00:00)
SLURM_TIME_FORMAT=%s sacctmgr -P -n show event format=NodeName,Start,End,State,TRES,Reason start="$day" \
    > "$OUT/sacctmgr-event-22.05.txt"
SLURM_TIME_FORMAT=%s sacctmgr -P -n show reservation format=Name,Start,End,Flags,NodeNames start="$day" \
    > "$OUT/sacctmgr-reservation-22.05.txt"
.venv/bin/slurm-hetero cluster down --workdir "$W"

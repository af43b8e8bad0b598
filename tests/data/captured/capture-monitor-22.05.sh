#!/bin/sh
# Captures the cluster exporter's fragmentation and queue-time input from the dev cluster
# (the demo site) on Slurm 22.05, as `sinfo-capacity-frag-22.05.txt`, `sinfo-json-frag-22.05.json`,
# `sinfo-frag-22.05.txt` and `squeue-json-frag-22.05.json` were made. As root:
#   sh capture-monitor-22.05.sh OUTDIR
# The state: 3 of 4 A100s busy on each A100 node (1 free on each), a 2-A100 job pending
# (Resources), 5 of 8 NPUs busy on npu-01, an H100 job placed by the bridge, a held job, a dependent job, a finished job and a
# job cancelled before it started.
set -eu
OUT=$1
W=/tmp/monitor-capture
rm -rf "$W"  # a fresh cluster: job ids from 1
.venv/bin/slurm-hetero cluster up --workdir "$W" --timeout 300
export SLURM_CONF="$W/etc/slurm.conf"
sub() { sbatch --parsable -o /dev/null "$@"; }
a=$(sub -p gpu -w a100-01 --gres=gpu:a100-80gb:3 -t 10 -J frag-a --wrap 'sleep 300')
sub -p gpu -w a100-02 --gres=gpu:a100-80gb:3 -t 10 -J frag-b --wrap 'sleep 300'
sub -p npu -w npu-01 --gres=npu:910b:5 -t 10 -J frag-npu --wrap 'sleep 300'
sub -t 5 -J frag-done --wrap true
sub --accel=h100:1 -t 10 -J frag-bridge --wrap "sleep 300"
sleep 8
sub -p gpu --gres=gpu:a100-80gb:2 -t 10 -J frag-wait --wrap 'sleep 5'
sub -p gpu -H --gres=gpu:h100:1 -t 10 -J frag-held --wrap true
sub -p gpu --dependency="afterok:$a" --gres=gpu:h100:2 -t 10 -J frag-dep --wrap true
c=$(sub -p gpu -H --gres=gpu:h100:1 -t 10 -J frag-never --wrap true)
sleep 2
scancel "$c"
sleep 40  # a scheduling pass gives the pending jobs their reasons
sinfo --json > "$OUT/sinfo-json-frag-22.05.json"
sinfo -N -h -O 'NodeList:|,StateLong:|,Gres:|,GresUsed:|,Features:|' > "$OUT/sinfo-capacity-frag-22.05.txt"
sinfo -N -h -o '%N|%T|%c|%m|%G|%f|%P|%E' > "$OUT/sinfo-frag-22.05.txt"
squeue --json > "$OUT/squeue-json-frag-22.05.json"
scancel -u root
.venv/bin/slurm-hetero cluster down --workdir "$W"

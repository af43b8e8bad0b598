#!/bin/sh
# Captures `sinfo-capacity-fit-22.05.txt` (the bridge snapshot's sinfo line with each node's
# CPUs and memory, placement.node_fit) from the dev cluster (the demo site) on Slurm 22.05,
# as it was made. As root:
#   sh capture-fit-22.05.sh OUTDIR
# The state: on a100-01, 1 A100 and 4 CPUs, then 2 A100s and 60 CPUs (all 64 CPUs busy, one
# A100 free); on h100-01, 3 H100s, 40 CPUs and 100 GiB.
set -eu
OUT=$1
W=/tmp/fit-capture
rm -rf "$W"
.venv/bin/slurm-hetero cluster up --workdir "$W" --timeout 300
export SLURM_CONF="$W/etc/slurm.conf"
sub() { sbatch --parsable -o /dev/null "$@"; }
sub -p gpu --gres=gpu:a100-80gb:1 -c 4 --mem=8G --wrap 'sleep 100'
sub -p gpu --gres=gpu:h100:3 -c 40 --mem=100G --wrap 'sleep 600'
sub -p gpu --gres=gpu:a100-80gb:2 -N1 -n 2 -c 30 --mem-per-cpu=2G --wrap 'sleep 600'
sleep 4
sinfo -N -h -O 'NodeList:|,StateLong:|,Gres:|,GresUsed:|,Features:|,CPUsState:|,Memory:|,AllocMem:|' \
    > "$OUT/sinfo-capacity-fit-22.05.txt"
scancel -u root
.venv/bin/slurm-hetero cluster down --workdir "$W"

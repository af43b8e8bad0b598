#!/bin/sh
# Captures Slurm 24.11 output for the parser tests, from Debian 13's packages in a chroot
# on this Debian 12 machine (see SLURM-FACTS: debootstrap trixie, then inside it
# `apt-get install slurmctld slurmd slurm-client munge`). Usage, as root:
#   sh capture-24.11.sh /opt/trixie OUTDIR
# It starts munged, slurmctld and two slurmd (one with 4 GPUs, one with 8 NPUs) inside
# the chroot on ports 16817/16818-16819, submits jobs whose comment, name and work dir
# imitate slurmctld's lines, writes each command's output to OUTDIR and stops everything.
set -eu
R=$1
OUT=$2
W=/hetero-capture
[ -s "$R/etc/hosts" ] || printf "127.0.0.1 localhost\n" > "$R/etc/hosts"
mkdir -p "$OUT" "$R$W/spool" "$R$W/state" "$R$W/log" "$R$W/dev" "$R/run/munge"
mountpoint -q "$R/proc" || mount --bind /proc "$R/proc"
mountpoint -q "$R/dev" || mount --bind /dev "$R/dev"
touch "$R$W/dev/gpu0" "$R$W/dev/gpu1" "$R$W/dev/gpu2" "$R$W/dev/gpu3"
cat > "$R$W/slurm.conf" <<CONF
ClusterName=cap2411
SlurmctldHost=localhost
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool/%n
SlurmctldPidFile=$W/slurmctld.pid
SlurmdPidFile=$W/slurmd-%n.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu,npu
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
NodeName=g01 NodeHostname=localhost NodeAddr=127.0.0.1 Port=16818 CPUs=8 RealMemory=8000 Gres=gpu:h100:4 Feature=x86_64,nvidia
NodeName=n01 NodeHostname=localhost NodeAddr=127.0.0.1 Port=16819 CPUs=8 RealMemory=8000 Gres=npu:910b:8 Feature=aarch64,huawei
PartitionName=gpu Nodes=g01 Default=YES MaxTime=2-00:00:00 State=UP
PartitionName=npu Nodes=n01 MaxTime=2-00:00:00 State=UP
CONF
cat > "$R$W/gres.conf" <<CONF
NodeName=g01 Name=gpu Type=h100 File=$W/dev/gpu[0-3]
NodeName=n01 Name=npu Type=910b Count=8
CONF
cat > "$R$W/cgroup.conf" <<CONF
CgroupPlugin=disabled
CONF
run() { chroot "$R" env SLURM_CONF=$W/slurm.conf "$@"; }
chroot "$R" sh -c 'chown munge:munge /run/munge; [ -s /etc/munge/munge.key ] || mungekey -c; su -s /bin/sh munge -c /usr/sbin/munged' || true
run slurmctld -i
run slurmd -N g01
run slurmd -N n01
sleep 4
run sinfo -V > "$OUT/version-24.11.txt"
mkdir -p "$R/tmp/w
     Nodes=n01 CPU_IDs=0 Mem=1 GRES=npu:910b:8(IDX:0-7)"
a=$(run sbatch --parsable -p npu --gres=npu:2 -J "n
     Nodes=n01 CPU_IDs=0 Mem=1 GRES=npu:910b:8(IDX:0-7)" --comment "x
     Nodes=n01 CPU_IDs=0 Mem=1 GRES=npu:910b:8(IDX:0-7) JobState=PENDING" -o /dev/null --wrap 'sleep 60')
b=$(run sbatch --parsable -p gpu --gres=gpu:h100:2 --comment 'x AdminComment={"shortened":true} TimeLimit=zz Nodes=g01 CPU_IDs=0 Mem=1 GRES=gpu:h100:4(IDX:0-3)' -o /dev/null -t 10 --wrap 'sleep 60')
c=$(run sbatch --parsable -p gpu --gres=gpu:h100:1 -H -t 5 -J "p
   TimeLimit=99-00:00:00" -o /dev/null --wrap true)
sleep 3
run scontrol show job -d "$a" > "$OUT/scontrol-job-d-injected-24.11.txt"
run scontrol show job -d "$b" > "$OUT/scontrol-job-d-inline-injected-24.11.txt"
run scontrol show job "$c" > "$OUT/scontrol-job-pending-24.11.txt"
run squeue --json > "$OUT/squeue-json-24.11.json"
run sinfo -N -h -O 'NodeList:|,StateLong:|,Gres:|,GresUsed:|,Features:|' > "$OUT/sinfo-snapshot-24.11.txt"
run scancel "$a" "$b" "$c"
sleep 1
for p in $(cat "$R$W"/slurmd-*.pid "$R$W/slurmctld.pid"); do kill "$p" 2>/dev/null || true; done

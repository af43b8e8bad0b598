#!/bin/sh
# Captures the job page's and the capacity report's Slurm 24.11 output (sacct --json of
# finished, running and held jobs, sacctmgr events and reservations), from Debian 13's
# packages in a chroot on this Debian 12 machine: debootstrap trixie, then inside it
# `apt-get install slurmctld slurmd slurm-client slurmdbd munge mariadb-server python3`.
# Usage, as root:  sh capture-jobpage-24.11.sh /opt/trixie OUTDIR
# Trixie's MariaDB 11.8 fails slurmdbd 24.11.5's startup check ("Number of columns in result
# (=1) set exceeds maximum allowed number of columns (=0)"), so slurmdbd uses a MariaDB of
# the host (Debian 12's 10.11) on 127.0.0.1:$DB_PORT (default 26306), started beforehand:
#   mysql_install_db --no-defaults --datadir=D --user=root --auth-root-authentication-method=normal
#   mariadbd --no-defaults --datadir=D --socket=D/s --port=26306 --bind-address=127.0.0.1 --user=root &
# It starts munged, slurmdbd, slurmctld and two slurmd (4 GPUs,
# 8 NPUs) inside the chroot on ports 26817-26820, runs the jobs, writes each command's
# output to OUTDIR and stops everything.
set -eu
R=$1
OUT=$2
W=/hetero-jobpage
[ -s "$R/etc/hosts" ] || printf "127.0.0.1 localhost\n" > "$R/etc/hosts"
mkdir -p "$OUT" "$R$W/spool" "$R$W/state" "$R$W/log" "$R$W/dev" "$R/run/munge" "$R/run/mysqld"
mountpoint -q "$R/proc" || mount --bind /proc "$R/proc"
mountpoint -q "$R/dev" || mount --bind /dev "$R/dev"
touch "$R$W/dev/gpu0" "$R$W/dev/gpu1" "$R$W/dev/gpu2" "$R$W/dev/gpu3"
cat > "$R$W/slurm.conf" <<CONF
ClusterName=jp2411
SlurmctldHost=localhost
SlurmctldPort=26817
SlurmdPort=26818
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
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=26820
AccountingStorageTRES=gres/gpu,gres/npu,gres/gpu:h100,gres/npu:910b
NodeName=g01 NodeHostname=localhost NodeAddr=127.0.0.1 Port=26818 CPUs=8 RealMemory=16000 Gres=gpu:h100:4 Feature=x86_64,nvidia
NodeName=n01 NodeHostname=localhost NodeAddr=127.0.0.1 Port=26819 CPUs=8 RealMemory=16000 Gres=npu:910b:8 Feature=aarch64,huawei
PartitionName=gpu Nodes=g01 Default=YES MaxTime=2-00:00:00 DefaultTime=1:00:00 State=UP
PartitionName=npu Nodes=n01 MaxTime=2-00:00:00 DefaultTime=1:00:00 State=UP
CONF
cat > "$R$W/gres.conf" <<CONF
NodeName=g01 Name=gpu Type=h100 File=$W/dev/gpu[0-3]
NodeName=n01 Name=npu Type=910b Count=8
CONF
printf "CgroupPlugin=disabled\n" > "$R$W/cgroup.conf"
cat > "$R$W/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=26820
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=${DB_PORT:-26306}
StorageUser=root
StorageLoc=jp2411_acct
PidFile=$W/slurmdbd.pid
LogFile=$W/log/slurmdbd.log
CONF
chmod 600 "$R$W/slurmdbd.conf"
run() { chroot "$R" env SLURM_CONF=$W/slurm.conf "$@"; }
chroot "$R" sh -c 'chown munge:munge /run/munge; [ -s /etc/munge/munge.key ] || mungekey -c; su -s /bin/sh munge -c /usr/sbin/munged' || true
run slurmdbd
sleep 3
run sacctmgr -i add cluster jp2411 >/dev/null || true
run sacctmgr -i add account acct >/dev/null || true
run sacctmgr -i add user root account=acct >/dev/null || true
run slurmctld -i
run slurmd -N g01
run slurmd -N n01
sleep 5
run scontrol update nodename=n01 state=drain reason="maint: fan | swap"
run scontrol create reservation reservationname=maint1 starttime=now duration=00:01:00 nodes=g01 flags=maint,ignore_jobs users=root >/dev/null
sleep 3
run scontrol delete reservationname=maint1
run scontrol update nodename=n01 state=resume
sleep 2
a=$(run sbatch --parsable --gres=gpu:h100:2 -c 4 --mem=8G -t 30 -J jp-gpu -o /dev/null --wrap 'srun python3 -c "
import time
x = bytearray(400 << 20)
for i in range(0, len(x), 4096): x[i] = 1
t = time.time()
while time.time() - t < 2: pass
time.sleep(34)"')
b=$(run sbatch --parsable --gres=npu:1 -p npu -t 10 -J jp-run -o /dev/null --wrap 'sleep 200')
c=$(run sbatch --parsable -H --gres=gpu:h100:1 -J jp-pend -o /dev/null --wrap true)
sleep 42
run sacct --json -j "$a" > "$OUT/sacct-json-gpu-24.11.json"
run sacct --json -j "$b" > "$OUT/sacct-json-running-24.11.json"
run sacct --json -j "$c" > "$OUT/sacct-json-pending-24.11.json"
run sacct --json -j 99999 > "$OUT/sacct-json-missing-24.11.json" || true
run squeue --json > "$OUT/squeue-json-jobpage-24.11.json"
day=$(date +%Y-%m-%dT00:00:00)
run env SLURM_TIME_FORMAT=%s sacctmgr -P -n show event format=NodeName,Start,End,State,TRES,Reason start="$day" > "$OUT/sacctmgr-event-24.11.txt"
run env SLURM_TIME_FORMAT=%s sacctmgr -P -n show reservation format=Name,Start,End,Flags,NodeNames start="$day" > "$OUT/sacctmgr-reservation-24.11.txt"
run scancel "$b" "$c"
sleep 1
for p in $(cat "$R$W"/slurmd-*.pid "$R$W/slurmctld.pid" "$R$W/slurmdbd.pid"); do kill "$p" 2>/dev/null || true; done

#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the tests of `dvt-hpo submit` and for CI:
# munged, slurmctld and slurmd as root, one node (this host) in two partitions: `debug` (the
# default) and `urgent`, whose jobs preempt debug's (PreemptMode=REQUEUE), so the tests can
# preempt a worker for real. Idempotent: a running cluster with the same slurm.conf is left
# alone; a changed config restarts the daemons. Needs Debian's slurm-wlm and munge
# (`apt-get install -y slurm-wlm munge`). Exits non-zero when the node does not come up idle.
set -euo pipefail

conf_dir=/etc/slurm
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
# The tests' workers are idle orchestrators of no-op trials: the node offers at least 16 CPUs
# so that every array task of a test runs at once on a 2-core machine (SlurmdParameters=
# config_overrides lets slurmd accept more CPUs than it finds).
node_cpus=$((cpus > 16 ? cpus : 16))
node_mem=$((mem_mb * 9 / 10))

mkdir -p "$conf_dir" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
new_conf=$(cat <<CONF
# Written by tests/cluster/slurm_up.sh.
ClusterName=dvthpo
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmdParameters=config_overrides
# No cgroups in a container: processes are tracked as the step's descendants.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
# What a worker gets between SIGTERM and SIGKILL (time limit, scancel): its trials are
# stopped and recorded interrupted within it.
KillWait=20
# Finished jobs stay visible to squeue this long (no accounting database here).
MinJobAge=600
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${node_cpus} RealMemory=${node_mem} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 GraceTime=20
PartitionName=urgent Nodes=${host} MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
CONF
)

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

changed=0
if [ ! -f "$conf_dir/slurm.conf" ] || [ "$(cat "$conf_dir/slurm.conf")" != "$new_conf" ]; then
  printf '%s\n' "$new_conf" >"$conf_dir/slurm.conf"
  changed=1
fi

if [ ! -s /etc/munge/munge.key ]; then
  mungekey --create --keyfile /etc/munge/munge.key
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 0700 /etc/munge
chmod 0400 /etc/munge/munge.key
# The daemons outlive this script: none may inherit a descriptor of the caller's, above all the
# one `flock /tmp/dvt-slurm.lock` holds its lock on (a munged holding it kept every later Slurm
# test waiting for good). The flock process keeps its own, so the lock holds until we exit.
for fd_path in /proc/$$/fd/*; do
  fd=${fd_path##*/}
  if [ "$fd" -gt 2 ] 2>/dev/null && [ "$fd" != 255 ]; then eval "exec $fd>&-"; fi
done
if ! running /run/munge/munged.pid; then
  runuser -u munge -- munged
fi

if [ "$changed" = 1 ]; then
  for pid_file in /run/slurmd.pid /run/slurmctld.pid; do
    if running "$pid_file"; then
      pid=$(cat "$pid_file")
      kill "$pid"
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    fi
  done
fi
running /run/slurmctld.pid || slurmctld
running /run/slurmd.pid || slurmd

for _ in $(seq 1 60); do
  state=$(sinfo -h -n "$host" -o %T 2>/dev/null | head -n 1 || true)
  case "$state" in
    idle* | mixed* | allocated*) echo "slurm: node $host $state"; exit 0 ;;
    down* | drain*) scontrol update NodeName="$host" State=RESUME 2>/dev/null || true ;;
  esac
  sleep 0.5
done
echo "slurm: node $host did not come up (state: ${state:-none}); see /var/log/slurm/" >&2
exit 1

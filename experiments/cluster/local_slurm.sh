#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for trying and testing sweeps without a real cluster.
#
#   experiments/cluster/local_slurm.sh up      # install what is missing, configure, start, wait until idle
#   experiments/cluster/local_slurm.sh down    # stop slurmd, slurmctld and munged
#   experiments/cluster/local_slurm.sh status  # sinfo, or why there is no cluster
#
# Needs root (apt-get and the daemons); Debian's slurm-wlm (22.05 on bookworm) and munge. Running
# `up` twice is harmless: daemons that already answer are left alone. The node gets this machine's
# cores and memory (less 1 GiB for the system); one partition, `local`, is the default. Daemons run
# as root with state under /var/lib/seal-slurm and logs in /var/log/seal-slurm.
set -euo pipefail

STATE=/var/lib/seal-slurm
LOGS=/var/log/seal-slurm
CONF=/etc/slurm/slurm.conf
NODE=$(hostname -s)

die() { echo "local_slurm: $*" >&2; exit 1; }
say() { echo "local_slurm: $*"; }

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (apt-get and the SLURM daemons); run it with sudo"
}

install_missing() {
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sinfo >/dev/null || missing+=(slurm-client)
  command -v munged >/dev/null || missing+=(munge)
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "${missing[@]}" >"$LOGS/apt.log" 2>&1 \
      || { apt-get update -q >>"$LOGS/apt.log" 2>&1 && apt-get install -y -q "${missing[@]}" >>"$LOGS/apt.log" 2>&1; } \
      || die "apt-get could not install ${missing[*]}; see $LOGS/apt.log"
  fi
}

write_conf() {
  local cpus mem_mb
  cpus=$(nproc)
  mem_mb=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024 ))
  mkdir -p /etc/slurm "$STATE/ctld" "$STATE/d"
  cat >"$CONF" <<EOF
# written by seal's experiments/cluster/local_slurm.sh: one node, this machine
ClusterName=seal-local
SlurmctldHost=$NODE
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=600
NodeName=$NODE CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
  # no cgroup.conf: with proctrack/linuxproc and task/none slurmd needs none (22.05 has no
  # CgroupPlugin=disabled, and a cgroup plugin would need a writable cgroup hierarchy)
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
  [ -s /etc/munge/munge.key ] || { mungekey --create >/dev/null 2>&1 || die "could not create /etc/munge/munge.key"; }
  chown munge:munge /etc/munge/munge.key 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
  if id munge >/dev/null 2>&1; then
    su -s /bin/sh munge -c "munged" 2>"$LOGS/munged.err" || munged --force 2>>"$LOGS/munged.err" || true
  else
    munged --force 2>"$LOGS/munged.err" || true
  fi
  for _ in $(seq 20); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return
    sleep 0.5
  done
  die "munged did not start; see $LOGS/munged.err"
}

running() { pgrep -x "$1" >/dev/null; }

node_state() { sinfo -h -n "$NODE" -o %t 2>/dev/null | head -1; }

up() {
  need_root
  mkdir -p "$LOGS" "$STATE"
  install_missing
  if running slurmctld && running slurmd && [ "$(node_state)" = idle ]; then
    say "already up: node $NODE idle"
    return
  fi
  write_conf
  start_munge
  running slurmctld || slurmctld -i || die "slurmctld did not start; see $LOGS/slurmctld.log"
  running slurmd || slurmd -N "$NODE" || die "slurmd did not start; see $LOGS/slurmd.log"
  local state=""
  for _ in $(seq 60); do
    state=$(node_state)
    case "$state" in
      idle|mix|alloc) say "up: node $NODE $state ($(nproc) cpus), partition local"; return ;;
      down*|drain*) scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 1
  done
  die "node $NODE is '${state:-not registered}' after 60 s; see $LOGS/slurmctld.log and $LOGS/slurmd.log"
}

down() {
  need_root
  # jobs first: a step left running would outlive the daemons
  if running slurmctld; then
    squeue -h -o %i 2>/dev/null | xargs -r scancel >/dev/null 2>&1 || true
    for _ in $(seq 30); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 1; done
  fi
  scontrol shutdown >/dev/null 2>&1 || true
  for daemon in slurmd slurmctld; do
    for _ in $(seq 20); do running "$daemon" || break; pkill -x "$daemon" || true; sleep 0.5; done
    running "$daemon" && die "$daemon is still running"
  done
  for _ in $(seq 20); do running munged || break; pkill -x munged || true; sleep 0.5; done
  say "down"
}

status() {
  if running slurmctld && sinfo >/dev/null 2>&1; then sinfo; else echo "local_slurm: no cluster (run: $0 up)"; return 1; fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac

#!/usr/bin/env bash
# A real single-node Slurm cluster (Debian/Ubuntu's Slurm 22.05) with job accounting, for evalfleet's Slurm
# tests and for trying the Slurm backend on one machine. Needs root; no systemd (the daemons are started by hand).
#
#   scripts/slurm-local.sh start    install what is missing, bring the cluster up (a running one is reused),
#                                   wait until the node is idle
#   scripts/slurm-local.sh stop     cancel its jobs, stop every daemon it started (pid files); nothing stays running
#   scripts/slurm-local.sh status   exit 0 when `sinfo` and `sacct` answer
#   scripts/slurm-local.sh env      print `export SLURM_CONF=...` (the commands need it: eval "$(... env)")
#
# Everything (configs, state, logs, sockets but munge's, the MariaDB data) lives under
# ${EVALFLEET_SLURM_STATE:-/tmp/evalfleet-slurm}; apt aside, nothing is written to /etc. Exit status 3 means
# "cannot start here" (not root, apt unreachable): the tests skip on it.
set -euo pipefail

STATE="${EVALFLEET_SLURM_STATE:-/tmp/evalfleet-slurm}"
CLUSTER="${EVALFLEET_SLURM_CLUSTER:-evalfleet}"
DB_PORT="${EVALFLEET_SLURM_DB_PORT:-36306}"
WAIT_S="${EVALFLEET_SLURM_WAIT_S:-180}"
ETC="$STATE/etc" RUN="$STATE/run" LOG="$STATE/log"
export SLURM_CONF="$ETC/slurm.conf"
PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
NODE="$(hostname -s)"

say() { echo "slurm-local: $*"; }
cannot() { say "cannot start here: $*" >&2; exit 3; }
die() { say "error: $*" >&2; exit 1; }

pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

tail_logs() {
  local f
  for f in "$LOG"/*.log; do
    [ -s "$f" ] || continue
    echo "--- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
}

# Polls "$@" (a command) once a second until it succeeds or $2 seconds pass; $1 names what we wait for. With
# WATCH=pidfile set, gives up early when that daemon has died.
wait_for() {
  local what="$1" limit="$2" i
  shift 2
  for ((i = 0; i < limit; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [ -n "${WATCH:-}" ] && ((i >= 3)) && ! pid_alive "$WATCH"; then
      say "the daemon of $WATCH died while waiting for $what" >&2
      tail_logs
      exit 1
    fi
    sleep 1
  done
  say "gave up after ${limit}s waiting for $what" >&2
  tail_logs
  exit 1
}

cluster_answers() {
  timeout 10 sinfo -h >/dev/null 2>&1 && timeout 10 sacct -n -X -S now >/dev/null 2>&1
}

install_missing() {
  local need=() pkg created_policy=0
  for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
  done
  ((${#need[@]})) || return 0
  command -v apt-get >/dev/null || cannot "no apt-get to install ${need[*]}"
  say "apt-get install ${need[*]}"
  # Package scripts must not start their services (there is no init here; we start them ourselves).
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && created_policy=1
  fi
  local ok=0
  for attempt in 1 2; do
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" \
      >"$STATE/apt.log" 2>&1; then
      ok=1 && break
    fi
    [ "$attempt" = 1 ] && { apt-get update -qq >>"$STATE/apt.log" 2>&1 || true; }
  done
  ((created_policy)) && rm -f /usr/sbin/policy-rc.d
  if ((!ok)); then
    tail -n 5 "$STATE/apt.log" >&2
    cannot "apt-get install ${need[*]} failed (apt unreachable?), see $STATE/apt.log"
  fi
}

write_configs() {
  mkdir -p "$ETC" "$RUN" "$LOG" "$STATE/spool/ctld" "$STATE/spool/d" "$STATE/munge"
  # The node as slurmd sees it: CPUs, sockets, cores, threads, RealMemory.
  local node_line mem cpus defmem
  node_line="$(slurmd -C | head -n 1)"
  mem="$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")"
  cpus="$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$node_line")"
  [ -n "$mem" ] && [ -n "$cpus" ] || die "cannot read this node from \`slurmd -C\`: $node_line"
  mem=$((mem * 95 / 100)) # leave slurmd some room so the node never drains for "Low RealMemory"
  node_line="$(sed "s/RealMemory=[0-9]*/RealMemory=$mem/; s/^NodeName=[^ ]*/NodeName=$NODE/" <<<"$node_line")"
  defmem=$((mem / 8 < 2048 ? mem / 8 : 2048))
  cat >"$ETC/slurm.conf.new" <<EOF
# Written by evalfleet's scripts/slurm-local.sh: a single-node test cluster.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job may start again only after the credential lifetime (default 120 s); 10 s keeps tests quick.
AuthInfo=cred_expire=10
CredType=cred/munge
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/d
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
# Cores and memory are consumable, but each core may hold up to 8 jobs (OverSubscribe=FORCE:8 below), so a small
# machine still runs several small jobs at once and an array throttle (%K) is what limits them; a job over its --mem
# is killed (OverMemoryKill).
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerNode=$defmem
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=task=1
JobAcctGatherParams=OverMemoryKill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
JobCompType=jobcomp/none
MaxArraySize=100001
MaxJobCount=200000
JobRequeue=1
MinJobAge=5
KillWait=2
OverTimeLimit=0
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
SchedulerType=sched/backfill
# Schedule every few seconds (the defaults, 60 s and 30 s, delay e.g. a requeued job's restart by up to a minute).
SchedulerParameters=sched_interval=2,bf_interval=2
$node_line State=UNKNOWN NodeAddr=127.0.0.1
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
  mv "$ETC/slurm.conf.new" "$ETC/slurm.conf"
  [ -s "$ETC/db.pass" ] || (umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$ETC/db.pass")
  (
    umask 077
    cat >"$ETC/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$(cat "$ETC/db.pass")
StorageLoc=slurm_acct_db
EOF
  )
  chmod 600 "$ETC/slurmdbd.conf"
}

start_munge() {
  pid_alive "$RUN/munged.pid" && return 0
  chown munge:munge "$STATE/munge" && chmod 700 "$STATE/munge"
  if [ ! -s "$STATE/munge/munge.key" ]; then
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile="$STATE/munge/munge.key"
    else
      dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
    fi
  fi
  chown munge:munge "$STATE/munge/munge.key" && chmod 400 "$STATE/munge/munge.key"
  # The socket stays at munge's default path: sacctmgr/sacct's connection to slurmdbd ignores AuthInfo=socket=.
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
  runuser -u munge -- munged --force --key-file="$STATE/munge/munge.key" --pid-file="$STATE/munge/munged.pid" \
    --log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/munged.seed" 9>&-
  wait_for "munged's pid file" 20 test -s "$STATE/munge/munged.pid"
  cp "$STATE/munge/munged.pid" "$RUN/munged.pid"
  wait_for "munged to answer" 20 sh -c "munge -n | unmunge"
}

mysql_root() { mariadb --no-defaults -S "$RUN/mysqld.sock" -u root "$@"; }

start_mariadb() {
  pid_alive "$RUN/mysqld.pid" && return 0
  local fresh=0
  if [ ! -d "$STATE/mysql/mysql" ]; then
    mkdir -p "$STATE/mysql" && chown mysql:mysql "$STATE/mysql"
    mariadb-install-db --no-defaults --user=mysql --datadir="$STATE/mysql" --skip-test-db \
      >"$LOG/mariadb-install-db.log" 2>&1 ||
      { tail -n 20 "$LOG/mariadb-install-db.log" >&2; die "mariadb-install-db failed"; }
    fresh=1
  fi
  chown mysql:mysql "$RUN" "$LOG" 2>/dev/null || true
  chmod 755 "$RUN" "$LOG"
  touch "$LOG/mariadb.log" && chown mysql:mysql "$LOG/mariadb.log"
  mariadbd --no-defaults --user=mysql --datadir="$STATE/mysql" --socket="$RUN/mysqld.sock" \
    --pid-file="$RUN/mysqld.pid" --log-error="$LOG/mariadb.log" --bind-address=127.0.0.1 --port="$DB_PORT" \
    --innodb-buffer-pool-size=128M --innodb-lock-wait-timeout=900 --innodb-log-file-size=64M \
    --max-allowed-packet=16M >/dev/null 2>&1 9>&- &
  WATCH="$RUN/mysqld.pid" wait_for "mariadbd to answer on $RUN/mysqld.sock" 60 mysql_root -e "SELECT 1"
  if ((fresh)); then
    local pass
    pass="$(cat "$ETC/db.pass")"
    mysql_root <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$pass';
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$pass';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
EOF
  fi
}

start_slurmdbd() {
  pid_alive "$RUN/slurmdbd.pid" && return 0
  slurmdbd 9>&- # the daemons must not keep the lock (fd 9) open
  WATCH="$RUN/slurmdbd.pid" wait_for "slurmdbd to answer (sacctmgr)" 60 timeout 10 sacctmgr -n list cluster
  if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
}

start_slurm() {
  pid_alive "$RUN/slurmctld.pid" || slurmctld 9>&-
  WATCH="$RUN/slurmctld.pid" wait_for "slurmctld to answer (scontrol ping)" 60 sh -c 'scontrol ping | grep -q UP'
  pid_alive "$RUN/slurmd.pid" || slurmd 9>&-
}

node_idle() {
  local state
  state="$(sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n 1)"
  case "$state" in
    idle | mixed | allocated | completing) return 0 ;;
    down* | drain* | fail*) scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true ;;
  esac
  return 1
}

wait_idle() {
  local i
  for ((i = 0; i < WAIT_S; i++)); do
    node_idle && cluster_answers && return 0
    sleep 1
  done
  say "node $NODE did not become idle within ${WAIT_S}s; sinfo says:" >&2
  sinfo -N -l >&2 || true
  sinfo -R >&2 || true
  tail_logs
  exit 1
}

our_steps() {
  # slurmstepd processes of this cluster's slurmd (their environment names our SLURM_CONF).
  local p exe
  exe="$(readlink -f "$(command -v slurmstepd || echo /usr/sbin/slurmstepd)")" # Debian: slurmstepd-wlm
  for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2>/dev/null)" = "$exe" ] || continue
    tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" && echo "${p#/proc/}"
  done
  return 0
}

# Stop daemons given as NAME=PIDFILE together: SIGTERM to all, then wait for all (SIGKILL after 15 s).
stop_pids() {
  local entry name file pid i alive
  local -a pids=() names=() files=()
  for entry in "$@"; do
    name="${entry%%=*}" file="${entry#*=}"
    [ -s "$file" ] || continue
    pid="$(cat "$file")"
    if kill -0 "$pid" 2>/dev/null; then
      kill "$pid" 2>/dev/null || true
      pids+=("$pid") names+=("$name")
    fi
    files+=("$file")
  done
  for ((i = 0; i < 150; i++)); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  for i in "${!pids[@]}"; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      say "${names[$i]} (${pids[$i]}) did not stop on SIGTERM; SIGKILL"
      kill -9 "${pids[$i]}" 2>/dev/null || true
    fi
  done
  [ "${#files[@]}" = 0 ] || rm -f "${files[@]}"
}

cmd_stop() {
  if pid_alive "$RUN/slurmctld.pid"; then
    local jobs
    jobs="$(timeout 10 squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')" || jobs=""
    # shellcheck disable=SC2086  # a list of job ids
    [ -n "${jobs// /}" ] && timeout 10 scancel $jobs 2>/dev/null || true
  fi
  local i steps
  for ((i = 0; i < 20; i++)); do
    steps="$(our_steps)"
    [ -z "$steps" ] && break
    sleep 0.5
  done
  # In three steps, each daemon of a step at once: slurmdbd writes what slurmctld sends it on the way down into
  # MariaDB, so it stops after the Slurm daemons and before the database.
  stop_pids slurmd="$RUN/slurmd.pid" slurmctld="$RUN/slurmctld.pid"
  stop_pids slurmdbd="$RUN/slurmdbd.pid"
  stop_pids mariadbd="$RUN/mysqld.pid" munged="$RUN/munged.pid"
  steps="$(our_steps)"
  if [ -n "$steps" ]; then
    say "job steps still running after scancel: $steps; SIGKILL"
    # shellcheck disable=SC2086
    kill -9 $steps 2>/dev/null || true
  fi
  say "stopped (state kept in $STATE)"
}

cmd_start() {
  if pid_alive "$RUN/slurmctld.pid" && cluster_answers && node_idle; then
    say "reusing the running cluster ($STATE)"
    return 0
  fi
  install_missing
  write_configs
  start_munge
  start_mariadb
  start_slurmdbd
  start_slurm
  wait_idle
  say "up: cluster $CLUSTER, node $NODE, partition debug (export SLURM_CONF=$SLURM_CONF)"
}

# One start or stop at a time (two test sessions may start it together).
lock() { mkdir -p "$STATE" && exec 9>"$STATE/lock" && flock -w 900 9 || die "cannot lock $STATE/lock"; }

case "${1:-}" in
  start)
    [ "$(id -u)" -eq 0 ] || cannot "needs root (it installs packages and runs the daemons as root)"
    lock && cmd_start
    ;;
  stop) lock && cmd_stop ;;
  status)
    if pid_alive "$RUN/slurmctld.pid" && cluster_answers; then
      sinfo
      exit 0
    fi
    say "not running"
    exit 1
    ;;
  env) echo "export SLURM_CONF=$SLURM_CONF" ;;
  *)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac

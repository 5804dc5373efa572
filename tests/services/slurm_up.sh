#!/usr/bin/env bash
# A real single-machine Slurm with accounting for the tests: munge + MariaDB + slurmdbd + slurmctld + slurmd,
# everything (sockets, state, database, logs, fake GPU device nodes) under WORKDIR, on free loopback ports.
#
# Usage: slurm_up.sh WORKDIR      needs root and the Debian packages from .ci/system-deps.sh
# SLURM_TEST_NODES=N (default 1): N > 1 runs N slurmd (nodes g1..gN, 4 fake GPUs each) on this machine.
# Writes WORKDIR/env (one NAME=VALUE a line: the daemons' PIDs and SLURM_CONF) as each daemon starts, so
# slurm_down.sh can stop exactly what was started even when start-up fails half way.
# Exit codes: 0 up (node idle), 1 failed to come up (log tails on stderr), 3 missing packages or not root.
set -euo pipefail
W=${1:?usage: slurm_up.sh WORKDIR}
H=$(hostname -s)
[ "$(id -u)" = 0 ] || { echo "slurm_up: needs root (slurmd and munged run as root here)" >&2; exit 3; }
for b in slurmctld slurmd slurmdbd sacctmgr sinfo munged mariadbd mariadb-install-db mariadb ss runuser; do
  command -v $b >/dev/null || { echo "slurm_up: $b not installed (run: bash .ci/system-deps.sh)" >&2; exit 3; }
done
[ -r /etc/munge/munge.key ] || { echo "slurm_up: /etc/munge/munge.key missing (munge package not configured)" >&2; exit 3; }

mkdir -p "$W"/{state,spool,log,run,mysql,dev}
chmod 755 "$W"
# slurmdbd and slurmctld run as the slurm user: every directory above WORKDIR must let it through
# (pytest's tmp_path lives under a mode-700 /tmp/pytest-of-root, which gives "Protocol authentication error")
runuser -u slurm -- test -x "$W" || { echo "slurm_up: user slurm cannot reach $W (a parent directory is not world-executable); use a directory like /tmp/xyz" >&2; exit 3; }
: > "$W/env"
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
CTLD=$(free_port); SLD=$(free_port); DBD=$(free_port); MYP=$(free_port)
fail() { echo "slurm_up: $1" >&2; tail -n 5 "$W"/log/*.log "$W"/log/*.out 2>/dev/null >&2 || true; exit 1; }
wait_port() { for _ in $(seq 1 150); do ss -ltn | grep -q ":$1 " && return 0; sleep 0.1; done; return 1; }

# munge on a private socket with a copy of the system key (root + --force: fine in a throwaway test box)
cp /etc/munge/munge.key "$W/munge.key"; chmod 600 "$W/munge.key"
munged --force --socket="$W/run/munge.sock" --key-file="$W/munge.key" --pid-file="$W/run/munged.pid" \
       --log-file="$W/log/munged.log" --seed-file="$W/run/munge.seed"
echo "MUNGED_PID=$(cat "$W/run/munged.pid")" >> "$W/env"

# MariaDB on a private datadir and port
mariadb-install-db --user=root --datadir="$W/mysql" --auth-root-authentication-method=socket --skip-test-db \
  > "$W/log/mariadb-install.log" 2>&1 || fail "mariadb-install-db failed"
mariadbd --user=root --datadir="$W/mysql" --socket="$W/run/mysql.sock" --port=$MYP --bind-address=127.0.0.1 \
         --log-error="$W/log/mariadbd.log" --innodb-buffer-pool-size=64M </dev/null >/dev/null 2>&1 &
echo "MARIADB_PID=$!" >> "$W/env"
for _ in $(seq 1 150); do mariadb -S "$W/run/mysql.sock" -uroot -e 'select 1' >/dev/null 2>&1 && break; sleep 0.1; done
mariadb -S "$W/run/mysql.sock" -uroot -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || fail "MariaDB did not come up"

# Fake GPUs: slurmd drops gpu GRES whose File= does not exist ("Removing file-less GPU"), so make char
# devices with the NVIDIA major number (195). Nothing opens them: the jobs only sleep.
N=${SLURM_TEST_NODES:-1}
for i in $(seq 0 $((4 * N - 1))); do [ -e "$W/dev/nvidia$i" ] || mknod "$W/dev/nvidia$i" c 195 $i; done

cat > "$W/slurm.conf" <<CONF
ClusterName=ci
SlurmctldHost=$H(127.0.0.1)
SlurmUser=slurm
SlurmctldPort=$CTLD
SlurmdPort=$SLD
AuthType=auth/munge
AuthInfo=socket=$W/run/munge.sock
CredType=cred/munge
StateSaveLocation=$W/state
SlurmdSpoolDir=$W/spool
SlurmctldPidFile=$W/run/slurmctld.pid
SlurmdPidFile=$W/run/slurmd.pid
SlurmctldLogFile=$W/log/slurmctld.log
SlurmdLogFile=$W/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$DBD
# slurmctld uses THIS as the munge socket for its slurmdbd connection (else /run/munge/munge.socket.2)
AccountingStoragePass=$W/run/munge.sock
AccountingStorageTRES=gres/gpu
ReturnToService=2
# jobs that do not ask for memory take 100 MB, not the whole node, so two 1-CPU jobs run side by side
DefMemPerCPU=100
CONF
if [ "$N" = 1 ]; then
  cat >> "$W/slurm.conf" <<CONF
NodeName=$H NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=4000 Gres=gpu:h100:4 State=UNKNOWN
PartitionName=gpu Nodes=$H Default=YES MaxTime=INFINITE State=UP
CONF
  echo "NodeName=$H Name=gpu Type=h100 File=$W/dev/nvidia[0-3]" > "$W/gres.conf"
else  # several slurmd on this machine: one port, spool, pid and log per node (%n)
  sed -i -e "s|^SlurmdSpoolDir=.*|SlurmdSpoolDir=$W/spool/%n|" -e "s|^SlurmdPidFile=.*|SlurmdPidFile=$W/run/slurmd-%n.pid|" \
         -e "s|^SlurmdLogFile=.*|SlurmdLogFile=$W/log/slurmd-%n.log|" -e "/^SlurmdPort=/d" "$W/slurm.conf"
  : > "$W/gres.conf"
  for n in $(seq 1 "$N"); do
    echo "NodeName=g$n NodeHostname=$H NodeAddr=127.0.0.1 Port=$(free_port) CPUs=$(nproc) RealMemory=4000 Gres=gpu:h100:4 State=UNKNOWN" >> "$W/slurm.conf"
    echo "NodeName=g$n Name=gpu Type=h100 File=$W/dev/nvidia[$((4 * n - 4))-$((4 * n - 1))]" >> "$W/gres.conf"
    mkdir -p "$W/spool/g$n"
  done
  echo "PartitionName=gpu Nodes=g[1-$N] Default=YES MaxTime=INFINITE State=UP" >> "$W/slurm.conf"
fi
cat > "$W/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$W/run/munge.sock
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$DBD
SlurmUser=slurm
PidFile=$W/run/slurmdbd.pid
LogFile=$W/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$MYP
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=slurm_acct_db
CONF
chown -R slurm:slurm "$W/state" "$W/log" "$W/run" "$W/slurmdbd.conf"; chmod 600 "$W/slurmdbd.conf"; chmod 755 "$W"
export SLURM_CONF="$W/slurm.conf"
echo "SLURM_CONF=$SLURM_CONF" >> "$W/env"

setsid slurmdbd -D </dev/null >"$W/log/slurmdbd.out" 2>&1 &
echo "SLURMDBD_PID=$!" >> "$W/env"
wait_port $DBD || fail "slurmdbd did not listen on $DBD"
# every Slurm client call is wrapped in timeout: they hang while a daemon they need is down
timeout 30 sacctmgr -i add cluster ci >/dev/null || fail "sacctmgr add cluster failed"
timeout 30 sacctmgr -i add account research Description=ci Organization=ci >/dev/null || fail "sacctmgr add account failed"
timeout 30 sacctmgr -i add user root DefaultAccount=research >/dev/null || true

setsid slurmctld -D -i </dev/null >"$W/log/slurmctld.out" 2>&1 &
echo "SLURMCTLD_PID=$!" >> "$W/env"
wait_port $CTLD || fail "slurmctld did not listen on $CTLD"
if [ "$N" = 1 ]; then
  setsid slurmd -D </dev/null >"$W/log/slurmd.out" 2>&1 &
  echo "SLURMD_PID=$!" >> "$W/env"
else
  for n in $(seq 1 "$N"); do
    setsid slurmd -D -N "g$n" </dev/null >"$W/log/slurmd-g$n.out" 2>&1 &
    echo "SLURMD_PID=$!" >> "$W/env"
  done
fi
all_idle() { local s; s=$(timeout 5 sinfo -h -N -o %T 2>/dev/null) && [ -n "$s" ] && ! echo "$s" | grep -qv '^idle'; }
for _ in $(seq 1 150); do all_idle && break; sleep 0.2; done
all_idle || fail "the node did not become idle"
cat "$W/env"

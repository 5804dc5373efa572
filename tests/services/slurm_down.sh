#!/usr/bin/env bash
# Stop exactly the daemons slurm_up.sh started, by the PIDs in WORKDIR/env: TERM, then KILL after a grace
# period (slurmd retrying its registration can ignore TERM for minutes). Never matches processes by name.
set -u
W=${1:?usage: slurm_down.sh WORKDIR}
[ -r "$W/env" ] || exit 0
pid_of() { sed -n "s/^$1=//p" "$W/env" | tail -n 1; }
alive() { local s; s=$(ps -p "$1" -o stat= 2>/dev/null | tr -d ' '); [ -n "$s" ] && [ "$s" != Z ]; }
stop() {  # stop PID... : TERM all, wait up to 5 s each, then KILL
  local p
  for p in "$@"; do [ -n "$p" ] && kill -TERM "$p" 2>/dev/null; done
  for p in "$@"; do
    [ -n "$p" ] || continue
    for _ in $(seq 1 25); do alive "$p" || break; sleep 0.2; done
    alive "$p" && kill -KILL "$p" 2>/dev/null
  done
  return 0
}
# Slurm first (they talk to the database and munge while shutting down), then MariaDB and munge.
# every slurmd (several when SLURM_TEST_NODES > 1), then the controller and the database daemon
stop $(sed -n 's/^SLURMD_PID=//p' "$W/env") "$(pid_of SLURMCTLD_PID)" "$(pid_of SLURMDBD_PID)"
stop "$(pid_of MARIADB_PID)" "$(pid_of MUNGED_PID)"
exit 0

#!/usr/bin/env bash
# Stop exactly the Prometheus that prometheus_up.sh WORKDIR started: TERM by pid, KILL after 10 s.
set -u
WORK=${1:?usage: prometheus_down.sh WORKDIR}
[ -f "$WORK/env" ] || exit 0
. "$WORK/env"
kill -TERM "$PROM_PID" 2>/dev/null || exit 0
for _ in $(seq 1 100); do kill -0 "$PROM_PID" 2>/dev/null || exit 0; sleep 0.1; done
kill -KILL "$PROM_PID" 2>/dev/null || true

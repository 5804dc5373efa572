#!/usr/bin/env bash
# Start a REAL Prometheus (Debian package `prometheus`, 2.42) for the live tests, history loaded first.
#   prometheus_up.sh WORKDIR [HISTORY.om]   -> prints and writes WORKDIR/env (PROM_URL, PROM_PID)
# - HISTORY.om (OpenMetrics text) is backfilled with promtool into an EMPTY data dir BEFORE start, with
#   --max-block-duration=72h (5x faster than the default 2h blocks), so days of history are queryable at once;
# - listens on 127.0.0.1 on a free port with its own storage dir (the package defaults are 0.0.0.0:9090 and
#   /var/lib/prometheus, and where systemd runs the package has started a server of its own);
# - exit 3 when prometheus/promtool are missing (tests skip; `make system-deps` installs them).
# Stop it with prometheus_down.sh WORKDIR (by pid, never by name).
set -euo pipefail
WORK=${1:?usage: prometheus_up.sh WORKDIR [HISTORY.om]}; HIST=${2:-}
for tool in prometheus promtool; do
  command -v "$tool" >/dev/null || { echo "prometheus_up: $tool not installed (apt-get install prometheus)" >&2; exit 3; }
done
mkdir -p "$WORK/data"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat > "$WORK/prometheus.yml" <<YML
global: {scrape_interval: 15s, evaluation_interval: 15s}
scrape_configs: []
YML
promtool check config "$WORK/prometheus.yml" >/dev/null
if [ -n "$HIST" ]; then
  promtool tsdb create-blocks-from openmetrics --quiet --max-block-duration=72h "$HIST" "$WORK/data" \
    > "$WORK/backfill.log" 2>&1 || { tail -5 "$WORK/backfill.log" >&2; exit 1; }
fi
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/data" \
  --web.listen-address="127.0.0.1:$PORT" --storage.tsdb.retention.time=3650d \
  > "$WORK/prometheus.log" 2>&1 &
PID=$!
printf 'PROM_URL=http://127.0.0.1:%s\nPROM_PID=%s\n' "$PORT" "$PID" > "$WORK/env"
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$PORT/-/ready" >/dev/null && { cat "$WORK/env"; exit 0; }
  kill -0 "$PID" 2>/dev/null || break
  sleep 0.05
done
echo "prometheus_up: not ready; last log lines:" >&2; tail -20 "$WORK/prometheus.log" >&2
kill -TERM "$PID" 2>/dev/null || true
exit 1

#!/usr/bin/env bash
# Install the Debian packages the test suite drives for real, only those missing. Never downloads a browser
# build of its own: Playwright drives Debian's /usr/bin/chromium.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v prometheus >/dev/null || need+=(prometheus)
command -v promtool >/dev/null || need+=(prometheus)
command -v slurmctld >/dev/null || need+=(slurm-wlm)
command -v slurmdbd >/dev/null || need+=(slurmdbd)
command -v mariadbd >/dev/null || need+=(mariadb-server)
command -v munged >/dev/null || need+=(munge)
command -v curl >/dev/null || need+=(curl)
command -v ss >/dev/null || need+=(iproute2)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "system-deps: missing ${need[*]}; run as root (or install them) — the tests that need them will skip" >&2
    exit 0
  fi
  echo "system-deps: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

#!/usr/bin/env bash
# The browser the dashboard's tests drive (tests/ui, bench/ui.py): Debian's chromium, through Playwright's
# Python package (its own browser downloads are not reachable here, so it is pointed at this one).
# Installed from apt once per machine; a no-op when it is there.
set -euo pipefail
if ! command -v chromium >/dev/null 2>&1; then
  echo "browser: apt-get install chromium" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

#!/usr/bin/env bash
# The alerting rules (tools/monitoring) are valid, behave as
# tests/monitoring/alerts_test.yml says, and name only metrics that
# dualpathd exports (every dualpath_* name in them is a metric family that
# daemon/core/metrics.cpp builds).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
rules=$src/tools/monitoring/dualpath-alerts.yml
command -v promtool >/dev/null || { echo "promtool is not installed (tools/quickstart installs it)"; exit 1; }
promtool check rules "$rules"
(cd "$here" && promtool test rules alerts_test.yml)
missing=0
for m in $(grep -o 'dualpath_[a-z_]*' "$rules" | sort -u); do
  if ! grep -q "\"$m\"" "$src/daemon/core/metrics.cpp"; then
    echo "the rules name $m, which dualpathd does not export"
    missing=1
  fi
done
exit $missing

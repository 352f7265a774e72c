#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The alerting rules and the Grafana dashboard (tools/monitoring): the rules
# are valid and behave as tests/monitoring/alerts_test.yml says, the
# dashboard is valid JSON with a query in every panel, and both name only
# metrics that dualpathd exports (every dualpath_* name in them is a metric
# family that daemon/core/metrics.cpp builds).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
rules=$src/tools/monitoring/dualpath-alerts.yml
command -v promtool >/dev/null || { echo "promtool is not installed (tools/quickstart installs it)"; exit 1; }
promtool check rules "$rules"
(cd "$here" && promtool test rules alerts_test.yml)
dashboard=$src/tools/monitoring/dualpath-dashboard.json
python3 - "$dashboard" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
bad = [p.get("title") for p in d["panels"] if not p.get("targets") or not all(t.get("expr") for t in p["targets"])]
assert not bad, f"panels without a query: {bad}"
print(f"{sys.argv[1]}: {len(d['panels'])} panels")
PY
missing=0
for f in "$rules" "$dashboard"; do
  for m in $(grep -o 'dualpath_[a-z_]*' "$f" | sort -u); do
    if ! grep -q "\"$m\"" "$src/daemon/core/metrics.cpp"; then
      echo "$(basename "$f") names $m, which dualpathd does not export"
      missing=1
    fi
  done
done
exit $missing

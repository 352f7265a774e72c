#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The alerting rules and the Grafana dashboard (tools/monitoring): the rules
# are valid and behave as tests/monitoring/alerts_test.yml says, their
# queries return what they must over 2,000 nodes (fleet_alerts.py), the
# dashboard is valid JSON with a query in every panel, and both name only
# metrics that dualpathd exports (every dualpath_* name in them is a metric
# family that daemon/core/metrics.cpp builds). The scrape configurations are
# valid Prometheus configuration; Debian's promtool is built without
# Kubernetes discovery, so the Kubernetes one is checked with its discovery
# block swapped for a static one (its relabelling checked as written).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
rules=$src/tools/monitoring/dualpath-alerts.yml
command -v promtool >/dev/null || { echo "promtool is not installed (tools/quickstart installs it)"; exit 1; }
promtool check rules "$rules"
(cd "$here" && promtool test rules alerts_test.yml)
# every alert's query over a fleet of 2,000 nodes, in the real Prometheus
"$here/fleet_alerts.py" --nodes 2000
for f in "$src"/tools/monitoring/prometheus-scrape*.yml; do
  if grep -q kubernetes_sd_configs "$f"; then
    tmp=$(mktemp --suffix=.yml)
    /usr/bin/python3 - "$f" "$tmp" <<'PY'
import sys, yaml
c = yaml.safe_load(open(sys.argv[1]))
for job in c["scrape_configs"]:
    assert job.pop("kubernetes_sd_configs")[0]["role"] == "pod", "pod discovery"
    job["static_configs"] = [{"targets": ["127.0.0.1:9464"]}]
yaml.safe_dump(c, open(sys.argv[2], "w"))
PY
    promtool check config "$tmp" >/dev/null || { rm -f "$tmp"; echo "$f: invalid"; exit 1; }
    rm -f "$tmp"
    echo "$f: valid (Kubernetes discovery swapped for static)"
  else
    promtool check config "$f" >/dev/null || { echo "$f: invalid"; exit 1; }
    echo "$f: valid"
  fi
  grep -q 'job_name: dualpath$' "$f" || { echo "$f: the job must be named dualpath (DualpathDown)"; exit 1; }
done
dashboard=$src/tools/monitoring/dualpath-dashboard.json
python3 - "$dashboard" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
bad = [p.get("title") for p in d["panels"] if not p.get("targets") or not all(t.get("expr") for t in p["targets"])]
assert not bad, f"panels without a query: {bad}"
# the fleet view: a node variable (its instance) under cluster and group,
# and per node the rails down and the policy's group hash
names = [v["name"] for v in d["templating"]["list"]]
assert {"cluster", "group", "instance"} <= set(names), f"variables: {names}"
node = next(v for v in d["templating"]["list"] if v["name"] == "instance")
assert node["label"] == "node" and "$group" in node["query"], node
fleet = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in d["panels"] if p["title"].startswith("Fleet:")}
assert any("health_state" in e and "by (instance)" in e for e in fleet.values()), "rails down per node"
assert any("group_hash" in e and "instance" in e for e in fleet.values()), "policy hash per node"
print(f"{sys.argv[1]}: {len(d['panels'])} panels")
PY
missing=0
for f in "$rules" "$dashboard"; do
  for m in $(grep -o 'dualpath_[a-z_]*' "$f" | sort -u); do
    family=${m%_bucket}  # a histogram's series are its family's name and a suffix
    family=${family%_count}
    family=${family%_sum}
    if ! grep -q "\"$family\"" "$src/daemon/core/metrics.cpp"; then
      echo "$(basename "$f") names $m, which dualpathd does not export"
      missing=1
    fi
  done
done
exit $missing

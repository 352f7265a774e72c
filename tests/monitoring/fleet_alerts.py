#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The fleet's alert queries at fleet scale: the real Prometheus evaluates
every alert expression of tools/monitoring over the series of N nodes
(default 2,000), and the test says exactly what each returns, so that a query
that joins or aggregates across nodes (DualpathPolicyDrift's count by group,
DualpathDecisionNotCarried's join on instance, class and path) is right with
thousands of nodes beside the ones it is about, not only with the one node
of alerts_test.yml.

Why not promtool: `promtool test rules` stops any query that loads more than
10,000 samples (a hard-coded limit, prometheus/prometheus#17237), which these
queries pass at about 1,000 nodes. The `for:` durations and the annotations
stay alerts_test.yml's (promtool, one node).

The fleet: N nodes in groups of 100, each with 2 rails and 5 classes, and
per node the series the alerts read, as dualpathd exports them. A few nodes
are wrong: one group's rollout is stuck with 3 nodes on another policy, 3
nodes have rail1 down, 2 nodes carry a class 20 points away from its
decision, 1 node does not answer scrapes. The series are written as
OpenMetrics, made into a TSDB block (promtool tsdb create-blocks-from
openmetrics) and served by a Prometheus started here on 127.0.0.1.

  tests/monitoring/fleet_alerts.py [--nodes 2000]

Prints the series, and each query's time in the real engine; exits 1 when a
query returns anything but what the fleet's faults make.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
RULES = os.path.join(HERE, "..", "..", "tools", "monitoring", "dualpath-alerts.yml")
CLASSES = ["expert-dispatch", "expert-combine", "param-sync", "control", "logs"]
PATHS = ["rail0", "rail1"]


def fleet(n):
    """The series by family, and what each alert's query must return: a set
    of (labels, value)."""
    inst = [f"node-{i:04d}:9464" for i in range(n)]
    group = [f"g{i // 100:02d}" for i in range(n)]
    late = group[n // 2]  # its rollout is stuck with 3 nodes on another policy
    stuck = set([i for i in range(n) if group[i] == late][:3])
    down = {5, n // 2, n - 1}  # rail1 down
    off = {17: ("param-sync", 0.8, 0.6), n - 7: ("expert-combine", 0.5, 0.3)}  # decided, carried
    silent = n // 3  # does not answer scrapes
    bfd_down = n // 4  # its rail0's BFD session is down
    stale = n // 5  # its rail1's samples stopped
    fams = {k: [] for k in ("dualpath_policy_info", "up", "dualpath_path_health_state",
                            "dualpath_class_decided_share_ratio",
                            "dualpath_class_carried_share_ratio")}
    # what every node exports for the other alerts, healthy but for two
    per_node = {"dualpath_all_paths_down": 0, "dualpath_multipath_ready": 1,
                "dualpath_policy_last_reload_successful": 1, "dualpath_metrics_age_seconds": 0.05}
    per_path = {"dualpath_path_health_weight_ratio": 1, "dualpath_path_bfd_up": 1,
                "dualpath_path_counters_agree": 1, "dualpath_path_sample_age_seconds": 0.05,
                "dualpath_path_loss_ratio": 0.001, "dualpath_path_utilisation_ratio": 0.3}
    for k in list(per_node) + list(per_path):
        fams[k] = []
    for i in range(n):
        for k, v in per_node.items():
            fams[k].append(({"instance": inst[i]}, v))
        for p in PATHS:
            for k, v in per_path.items():
                if k == "dualpath_path_bfd_up" and i == bfd_down and p == "rail0":
                    v = 0
                if k == "dualpath_path_sample_age_seconds" and i == stale and p == "rail1":
                    v = 60
                fams[k].append(({"instance": inst[i], "path": p}, v))
        fams["dualpath_policy_info"].append(
            ({"instance": inst[i], "node": inst[i].split(":")[0], "cluster": "fleet",
              "group": group[i], "group_hash": "b" * 16 if i in stuck else "a" * 16}, 1))
        fams["up"].append(({"job": "dualpath", "instance": inst[i]}, 0 if i == silent else 1))
        for p in PATHS:
            now = "down" if i in down and p == "rail1" else "up"
            for st in ("up", "suspect", "down", "holddown", "ramping"):
                fams["dualpath_path_health_state"].append(
                    ({"instance": inst[i], "path": p, "state": st}, 1 if st == now else 0))
        for c in CLASSES:
            for p in PATHS:
                decided = carried = 1.0 if p == "rail0" else 0.0
                if i in off and off[i][0] == c:
                    decided = off[i][1] if p == "rail0" else round(1 - off[i][1], 2)
                    carried = off[i][2] if p == "rail0" else round(1 - off[i][2], 2)
                lab = {"instance": inst[i], "class": c, "path": p}
                fams["dualpath_class_decided_share_ratio"].append((lab, decided))
                fams["dualpath_class_carried_share_ratio"].append((lab, carried))
    want = {
        "DualpathPolicyDrift": [({"cluster": "fleet", "group": late}, 2)],
        "DualpathPathDown": [({"instance": inst[i], "path": "rail1"}, 1) for i in sorted(down)],
        "DualpathDown": [({"job": "dualpath", "instance": inst[silent]}, 0)],
        "DualpathBfdDown": [({"instance": inst[bfd_down], "path": "rail0"}, 0)],
        "DualpathStale": [({"instance": inst[stale], "path": "rail1"}, 60)],
        "DualpathDecisionNotCarried": [({"instance": inst[i], "class": c, "path": p},
                                        round(abs(dec - car), 2))
                                       for i, (c, dec, car) in off.items() for p in PATHS],
    }
    return fams, want


def openmetrics(fams, at, path):
    """Each series sampled every minute for the 5 minutes up to `at`."""
    count = 0
    with open(path, "w") as f:
        for name, series in fams.items():
            f.write(f"# TYPE {name} gauge\n")
            for labels, value in series:
                body = ",".join(f'{k}="{v}"' for k, v in labels.items())
                for t in range(at - 240, at + 1, 60):
                    f.write(f"{name}{{{body}}} {value} {t}\n")
                count += 1
        f.write("# EOF\n")
    return count


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(port, expr, at):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode(
        {"query": expr, "time": at})
    with urllib.request.urlopen(url, timeout=60) as r:
        d = json.load(r)
    if d["status"] != "success":
        raise RuntimeError(f"{expr}: {d}")
    return [(m["metric"], float(m["value"][1])) for m in d["data"]["result"]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=2000)
    a = ap.parse_args()
    if a.nodes < 100:
        sys.exit("--nodes: at least 100 (one group)")
    for tool in ("prometheus", "promtool"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (tools/quickstart installs it)")
    rules = {r["alert"]: r["expr"] for g in yaml.safe_load(open(RULES))["groups"]
             for r in g["rules"] if "alert" in r}
    fams, want = fleet(a.nodes)
    at = (int(time.time()) - 3 * 3600) // 60 * 60  # in a block of its own, before the head
    work = tempfile.mkdtemp(prefix="dp-fleet-alerts.")
    prom = None
    failed = 0
    try:
        count = openmetrics(fams, at, os.path.join(work, "fleet.om"))
        began = time.monotonic()
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics",
                        os.path.join(work, "fleet.om"), os.path.join(work, "tsdb")],
                       check=True, stdout=subprocess.DEVNULL)
        made = time.monotonic() - began
        os.unlink(os.path.join(work, "fleet.om"))
        open(os.path.join(work, "prometheus.yml"), "w").write("global: {}\n")
        port = free_port()
        prom = subprocess.Popen(
            ["prometheus", f"--config.file={work}/prometheus.yml",
             f"--storage.tsdb.path={work}/tsdb", "--storage.tsdb.retention.time=10y",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "prometheus.log"), "w"))
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1)
                break
            except OSError:
                if prom.poll() is not None:
                    sys.exit("prometheus exited:\n" + open(f"{work}/prometheus.log").read())
                time.sleep(0.1)
        print(f"{a.nodes} nodes, {count} series; the block made in {made:.1f} s")
        fed = {name for name, expr in rules.items()
               if any(f in expr for f in fams) and "_bucket" not in expr}
        for name, expr in rules.items():
            if name not in fed:
                print(f"  --   {name}: not fed (its series need history: alerts_test.yml)")
                continue
            t0 = time.monotonic()
            # an alert's labels are the result's, less the metric name a
            # comparison keeps
            got = [({k: v for k, v in l.items() if k != "__name__"}, v)
                   for l, v in query(port, expr, at)]
            ms = (time.monotonic() - t0) * 1000
            expect = want.get(name, [])  # the fleet has no other fault
            norm = lambda rows: sorted((json.dumps(l, sort_keys=True), round(v, 6)) for l, v in rows)
            ok = norm(got) == norm(expect)
            failed += not ok
            print(f"  {'ok  ' if ok else 'FAIL'} {name}: {len(got)} series in {ms:.0f} ms")
            if not ok:
                print(f"       want {norm(expect)}\n       got  {norm(got)[:10]}")
    finally:
        if prom:
            prom.send_signal(signal.SIGTERM)
            try:
                prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                prom.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What dualpath's per-packet programs cost for a multipath class's subflows
# against a plain class matched the same way (by cgroup), on the same load, in
# one run: the kernel's own accounting of each program's run time
# (kernel.bpf_stats_enabled, on for the run and restored after).
#
#   DP_BUILD=build tests/bench/packet-cost.sh [--rounds N] [--rate RATE]
#
# The shared lab (tools/dp-lab) with the policies of `dp-lab mode multipath`
# plus a class bench-plain (elastic, cgroup /dpl-bench-plain, like bench-mp
# but without multipath). Each round runs dp-load's stream workload (the logs
# stream at RATE and a 1 MiB param-sync transfer a second, 5 s) from a to b
# under `dpctl run` in each class: bench-plain over TCP, bench-mp over MPTCP.
# ns/run is run_time_ns over run_cnt summed over both nodes' copies of the
# program; the counts are of the program's runs (GSO packets on veth), so the
# two classes' counts differ, not their loads. bpf_stats itself adds some
# tens of ns to every run.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${DP_BUILD:-$repo/build}
export DP_BUILD=$build
lab=$repo/tools/dp-lab
rounds=3 rate=400Mbit
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--rate RATE]" >&2; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "needs root" >&2; exit 1; }
command -v bpftool >/dev/null || { echo "needs bpftool" >&2; exit 1; }
if ip netns list | grep -qw dpl-a; then
  echo "the lab is up; take it down first (tools/dp-lab down)" >&2
  exit 1
fi
stats_before=$(sysctl -n kernel.bpf_stats_enabled)
pol=$(mktemp -d /tmp/dp-packet-cost.XXXXXX)
cleanup() {
  sysctl -qw kernel.bpf_stats_enabled="$stats_before" || true
  "$lab" down >/dev/null 2>&1 || true
  rm -rf "$pol"
}
trap cleanup EXIT

"$lab" up >/dev/null
"$lab" mode multipath >/dev/null
state=${DP_LAB_STATE:-/run/dualpath-lab}
for n in a b; do
  cp "$state/policies-multipath/lab-$n.toml" "$pol/"
  printf '%s\n' '' '[[class]]' 'name = "bench-plain"' 'kind = "elastic"' 'priority = 4' \
    'prefer = "rail0"' 'cgroups = ["/dpl-bench-plain"]' >>"$pol/lab-$n.toml"
done
"$lab" stop >/dev/null
DP_LAB_POLICIES=$pol "$lab" start >/dev/null
sleep 2

# the programs' run time and run count, summed by name over both daemons
snap() {
  bpftool prog show -j | python3 -c '
import json, sys
t = {}
for p in json.load(sys.stdin):
    n = p.get("name", "")
    if n in ("dp_egress", "dp_ingress", "dp_sockops"):
        a = t.setdefault(n, [0, 0])
        a[0] += p.get("run_time_ns", 0)
        a[1] += p.get("run_cnt", 0)
print(json.dumps(t))'
}

dpctl=$build/tools/dpctl/dpctl
load=$build/tools/dp-load/dp-load
ports=(--port-dispatch 45000 --port-combine 46000 --port-sync 47000 --port-control 48000
  --port-logs 49000)
sysctl -qw kernel.bpf_stats_enabled=1
rows=$(mktemp)
for ((r = 1; r <= rounds; r++)); do
  for cls in bench-plain bench-mp; do
    mp=()
    [[ $cls == bench-mp ]] && mp=(--mptcp)
    "$lab" exec b "$dpctl" -s /run/dualpath/dpl-b.sock run --class "$cls" -- \
      "$load" server --once "${mp[@]}" "${ports[@]}" >/dev/null 2>&1 &
    server=$!
    sleep 1
    s0=$(snap)
    "$lab" exec a "$dpctl" -s /run/dualpath/dpl-a.sock run --class "$cls" -- \
      "$load" client --connect 10.99.0.2 -q --workload stream --logs-rate "$rate" \
      --sync-size 1MiB --sync-every 1s --duration 5s "${mp[@]}" "${ports[@]}" >/dev/null
    s1=$(snap)
    wait "$server" || true
    python3 - "$r" "$cls" "$s0" "$s1" >>"$rows" <<'EOF'
import json, sys
r, cls, a, b = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
cells = []
for n in ("dp_egress", "dp_ingress", "dp_sockops"):
    dt, dc = b[n][0] - a[n][0], b[n][1] - a[n][1]
    cells += ["%.0f" % (dt / max(dc, 1)), str(dc)]
print(r, cls, *cells)
EOF
  done
done

echo "per-packet program cost, shared lab (1gbit + 250mbit), stream workload at $rate, $rounds rounds"
echo
python3 - "$rows" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
hdr = ("round", "class", "egress ns/run", "runs", "ingress ns/run", "runs", "sockops ns/run", "runs")
fmt = "%-6s %-12s %14s %8s %15s %8s %15s %8s"
print(fmt % hdr)
for r in rows:
    print(fmt % tuple(r))
print()
for cls in ("bench-plain", "bench-mp"):
    m = [statistics.median(float(r[i]) for r in rows if r[1] == cls) for i in (2, 4, 6)]
    print("median %-12s egress %5.0f ns   ingress %5.0f ns   sockops %5.0f ns" % (cls, *m))
EOF
rm -f "$rows"

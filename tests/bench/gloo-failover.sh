#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A real torch.distributed gloo job between the separate lab's nodes through
# a failure of the rail its connections were made on: such a job must carry
# on over the other rail, where without a multipath class it would hang
# until gloo's 60 s timeout or abort on a reset. Both ranks run under
# `dpctl run --class bench-mp` (the multipath class of `dp-lab mode
# multipath`) with GLOO_SOCKET_IFNAME=rail0, as a job given the front-end
# interface binds; 5 s in, b's rail0 loses its carrier or is blackholed (or
# nothing happens: the baseline). Prints, per trial, whether the job
# finished, its iterations and the longest gap between two iterations (one
# iteration moves 4 MiB each way and takes ~134 ms on the 250 Mbit rail
# alone).
#
#   DP_BUILD=build tests/bench/gloo-failover.sh [--trials N] [--seconds S]
#
# Needs Debian's python3-torch (not a build or test dependency:
# `apt-get install python3-torch`); exits 77 without it. Leaves the lab down.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export DP_BUILD=${DP_BUILD:-$repo/build}
lab=$repo/tools/dp-lab
py=/usr/bin/python3
trials=3 seconds=12
while (($#)); do
  case "$1" in
    --trials) trials=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    *) echo "usage: $0 [--trials N] [--seconds S]" >&2; exit 2 ;;
  esac
done
if ! "$py" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
  echo "gloo-failover: needs python3-torch with gloo (apt-get install python3-torch)" >&2
  exit 77
fi
if ip netns list | grep -qw dpl-a; then
  echo "gloo-failover: a lab is up; run 'tools/dp-lab down' first" >&2
  exit 1
fi
work=$(mktemp -d)
trap '"$lab" fault clear >/dev/null 2>&1 || true; "$lab" down >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
"$lab" up --topology separate --no-daemon >/dev/null
"$lab" mode multipath >/dev/null

printf '%-10s %-6s %-9s %-11s %-22s\n' fault trial finished iterations "longest gap ms (a / b)"
for fault in down blackhole none; do
  for ((t = 1; t <= trials; t++)); do
    for r in 0 1; do
      node=a; ((r)) && node=b
      "$lab" dpctl $node run --class bench-mp -- env GLOO_SOCKET_IFNAME=rail0 \
        "$py" "$here/gloo_job.py" $r 10.10.1.1 "$seconds" >"$work/$r.log" 2>&1 &
      sleep 0.5
    done
    sleep 4.5
    [[ $fault == none ]] || "$lab" fault b "$fault" rail0 >/dev/null
    wait
    ok=yes
    read -r _ _ _ it0 _ gap0 < <(grep '^rank 0 ' "$work/0.log" || echo "- - - - - -")
    read -r _ _ _ _ _ gap1 < <(grep '^rank 1 ' "$work/1.log" || echo "- - - - - -")
    [[ $gap0 == - || $gap1 == - ]] && ok=no
    printf '%-10s %-6s %-9s %-11s %-22s\n' "$fault" "$t" "$ok" "$it0" "$gap0 / $gap1"
    [[ $ok == yes ]] || tail -n 3 "$work/0.log" "$work/1.log" >&2
    "$lab" fault clear >/dev/null 2>&1 || true
    "$lab" mode multipath >/dev/null # the carrier's routes back, the daemons afresh
  done
done

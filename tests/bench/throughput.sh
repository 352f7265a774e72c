#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Single-stream TCP throughput over a veth rail with and without dualpath's
# programs attached, alternated in one run (tools/dp-lab, rails unshaped).
#
#   tests/bench/throughput.sh [--rounds N] [--seconds S]
#
# Modes per round, in this order:
#   without      no dualpathd, no programs: the kernel alone (rail0)
#   with/stays   dualpathd running, expert-dispatch (its class stays on rail0)
#   with/steered dualpathd running, param-sync: redirected from rail0 to rail1
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
lab=$repo/tools/dp-lab
rounds=3 secs=5
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --seconds) secs=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--seconds S]" >&2; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "needs root" >&2; exit 1; }
if ip netns list | grep -qw dpl-a; then
  echo "the lab is up; take it down first (tools/dp-lab down)" >&2
  exit 1
fi
trap '"$lab" down >/dev/null 2>&1 || true' EXIT
"$lab" up --no-shaping --no-daemon >/dev/null

iperf() { # port -> Mbit/s at the receiver
  "$lab" exec b iperf3 -s -1 -D -p "$1" >/dev/null
  sleep 0.3
  "$lab" exec a iperf3 -c 10.99.0.2 -p "$1" -t "$secs" -f m | awk '/receiver/ { print $(NF-2) }'
}

declare -A sum n
record() { sum[$1]=$(awk -v a="${sum[$1]:-0}" -v b="$2" 'BEGIN { print a + b }'); n[$1]=$((${n[$1]:-0} + 1)); }

echo "veth single-stream TCP, $rounds rounds x ${secs}s per mode, alternated"
printf '%-7s %-14s %14s\n' round mode "Mbit/s"
for ((r = 1; r <= rounds; r++)); do
  "$lab" stop >/dev/null 2>&1
  v=$(iperf 50001); record without "$v"; printf '%-7s %-14s %14s\n' "$r" without "$v"
  "$lab" start >/dev/null
  v=$(iperf 50002); record with/stays "$v"; printf '%-7s %-14s %14s\n' "$r" with/stays "$v"
  v=$(iperf 52001); record with/steered "$v"; printf '%-7s %-14s %14s\n' "$r" with/steered "$v"
done
"$lab" stop >/dev/null 2>&1

echo
printf '%-14s %14s %12s %8s\n' mode "mean Mbit/s" "of without" goal
base=$(awk -v s="${sum[without]}" -v k="${n[without]}" 'BEGIN { print s / k }')
for m in without with/stays with/steered; do
  mean=$(awk -v s="${sum[$m]}" -v k="${n[$m]}" 'BEGIN { print s / k }')
  pct=$(awk -v a="$mean" -v b="$base" 'BEGIN { printf "%.1f%%", 100 * a / b }')
  goal=$([[ $m == without ]] && echo "-" || echo ">= 95%")
  printf '%-14s %14.0f %12s %8s\n' "$m" "$mean" "$pct" "$goal"
done

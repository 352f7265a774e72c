#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dp-load's --congestion-control: an algorithm the kernel lacks is refused
# before anything is sent (exit 2), and one it has is what every socket runs,
# at both ends, whatever the network namespace's default. And the warm-up:
# the steps started before any had finished are reported apart, not in the
# step times. Runs in a network namespace of its own (unshare -n: loopback
# only, gone when it ends).
set -uo pipefail
load=$1
fails=0
refused() {  # refused NAME ARGS...: exit 2 and the reason, before anything is sent
  local name=$1 out rc
  shift
  out=$("$load" "$@" --congestion-control nosuch 2>&1)
  rc=$?
  if [[ $rc == 2 && $out == *"congestion control 'nosuch': not in this kernel"* ]]; then
    echo "ok   $name refuses an unknown congestion control"
  else
    echo "FAIL $name, unknown congestion control: rc $rc, output: $out"
    fails=$((fails + 1))
  fi
}
refused client client --connect 127.0.0.1
refused server server

if ! unshare -n true 2>/dev/null; then
  echo "skip the rest: it needs a network namespace of its own (root)"
  exit $((fails > 0 ? 1 : 77))
fi
run=$(mktemp)
trap 'rm -f "$run"' EXIT
# shellcheck disable=SC2016  # expanded by the inner shell
out=$(unshare -n bash -c '
  set -u
  load=$1
  ip link set lo up
  "$load" server --bind 127.0.0.1 --once --congestion-control reno >/dev/null 2>&1 &
  srv=$!
  trap "kill $srv 2>/dev/null; wait 2>/dev/null" EXIT
  sleep 0.3
  "$load" client --connect 127.0.0.1 --workload moe,rpc --concurrency 2 --duration 2s \
    --congestion-control reno --json "$2" -q >/dev/null 2>&1 &
  cli=$!
  sleep 1
  echo "default $(cat /proc/sys/net/ipv4/tcp_congestion_control)"
  ss -tinH state established "( sport = :53000 or dport = :53000 )"
  wait $cli
  echo "client rc $?"
' _ "$load" "$run" 2>&1)
default=$(sed -n 's/^default //p' <<<"$out")
reno=$(grep -cw reno <<<"$out")
if [[ $out == *"client rc 0"* && $reno -ge 2 ]]; then
  echo "ok   both ends' sockets run reno (the namespace's default: $default)"
  [[ $default == reno ]] && echo "     (reno is the default here: the option's effect is not seen)"
else
  echo "FAIL --congestion-control reno: $reno sockets show reno; ss and the run:"
  echo "$out"
  fails=$((fails + 1))
fi
# two steps in flight: the first two start before any finishes
warm=$(python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))["steps"]
print(s["warmup"]["steps"], len(s["warmup"]["ms"]), s["completed"] - s["time_ms"]["count"])
' "$run" 2>&1)
if [[ $warm == "2 2 2" ]]; then
  echo "ok   the two warm-up steps are reported apart and not in the step times"
else
  echo "FAIL warm-up (steps, times, completed less counted; want 2 2 2): $warm"
  fails=$((fails + 1))
fi
exit $((fails > 0))

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The NCCL net plugin between the lab's two nodes (tools/dp-lab), one rank of
# the harness in each: every byte checked by the harness; the bytes each rail
# carried, from node a's kernel link counters, against the placement the
# plugin logged (within 10%); then a blackhole and a carrier loss of rail0
# mid-transfer: no error, data intact, the longest stall reported; then the
# rails named by their IPv6 addresses. The plugin runs on the rails
# NCCL_DUALPATH_RAILS names, without dualpathd (about 15 s).
# DP_NCCL_LAB_DAEMON=1 runs the lab with dualpathd (DP_NCCL_LAB_BUILD or the
# build given has it) and policies with an [nccl] mapping, and also checks the
# class by operation and by traffic class, that dualpathd's scheduler sees
# the plugin's bytes as its class's load (an elastic class spills to rail1
# when the plugin fills rail0), counts them in their class and logs its moves
# (about 35 s; CI runs both
# modes: lab_nccl and lab_nccl_daemon). Takes the lab lock; skipped without root or
# while a lab is up. DP_NCCL_LAB_KEEP=DIR keeps the ranks' logs there;
# DP_NCCL_LAB_TOPOLOGY=separate runs it on the separate topology (a router
# per rail: each rail's streams go to the peer's address on that rail).
#   lab_nccl.sh BUILD_DIR HARNESS PLUGIN
set -euo pipefail
build=${1:?usage: lab_nccl.sh BUILD_DIR HARNESS PLUGIN}
harness=${2:?}
plugin=${3:?}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lab="$here/../../tools/dp-lab"
[[ $(id -u) == 0 ]] || { echo "skipped: the lab needs root"; exit 77; }
exec 9>/tmp/dp-lab.lock
flock 9
if ip netns list | grep -qw dpl-a; then
  echo "skipped: a lab is already up (tools/dp-lab down first)"
  exit 77
fi
export DP_BUILD=${DP_NCCL_LAB_BUILD:-$build}
work=$(mktemp -d /tmp/dp-nccl-lab.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$lab" fault clear >/dev/null 2>&1 || true
  "$lab" down >/dev/null 2>&1 || true
  if [[ -n ${DP_NCCL_LAB_KEEP:-} ]]; then
    rm -rf "$DP_NCCL_LAB_KEEP" && cp -r "$work" "$DP_NCCL_LAB_KEEP"
  fi
  rm -rf "$work"
}
trap cleanup EXIT

daemon_opt=(--no-daemon)
if [[ ${DP_NCCL_LAB_DAEMON:-0} == 1 ]]; then
  [[ -x $DP_BUILD/daemon/dualpathd ]] || { echo "FAIL: $DP_BUILD/daemon/dualpathd is not built"; exit 1; }
  daemon_opt=()
  # the lab's policies with an [nccl] mapping (dualpath-policy(5)): alltoall
  # in an elastic class, which the scheduler spills when its rail is hot
  export DP_LAB_POLICIES="$work/policies"
  mkdir -p "$DP_LAB_POLICIES"
  for n in a b; do
    cp "$here/../../policies/lab-$n.toml" "$DP_LAB_POLICIES/"
    printf '\n[nccl]\noperation.alltoall = "expert-combine"\ntraffic_class.3 = "param-sync"\n' \
      >>"$DP_LAB_POLICIES/lab-$n.toml"
  done
fi
topology=${DP_NCCL_LAB_TOPOLOGY:-shared}
"$lab" up --topology "$topology" "${daemon_opt[@]}" >"$work/up.log" 2>&1 || { cat "$work/up.log"; exit 1; }
mode="without dualpathd"
((${#daemon_opt[@]})) || mode="with dualpathd"
echo "lab up ($topology topology, $mode)"

tx_bytes() { # node rail
  "$lab" exec "$1" ip -j -s link show dev "$2" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])'
}

# run_pair NAME ROUNDS BYTES [FAULT...]: both ranks (the harness announces
# alltoall; DP_TC: the communicators' traffic class); the fault (dp-lab fault
# arguments) 1.5 s in, cleared 2 s later
run_pair() {
  local name=$1 rounds=$2 bytes=$3
  shift 3
  local ex="$work/$name"
  mkdir -p "$ex"
  pids=()
  for r in 0 1; do
    local node=a
    ((r == 1)) && node=b
    local env=(NCCL_DUALPATH_STALL_MS=200 NCCL_DUALPATH_TIMEOUT_MS=20000)
    if ((${#daemon_opt[@]})) && [[ ${DP_V6:-0} == 1 ]]; then
      # each rail's IPv6 address (the lab's fd98::/64 and fd98:1::/64)
      env+=("NCCL_DUALPATH_RAILS=rail0=fd98::$((r + 1))@1Gbit,rail1=fd98:1::$((r + 1))@250Mbit" NCCL_DUALPATH_DAEMON=0)
    elif ((${#daemon_opt[@]})); then
      env+=("NCCL_DUALPATH_RAILS=rail0@1Gbit,rail1@250Mbit" NCCL_DUALPATH_DAEMON=0)
    else
      env+=("NCCL_DUALPATH_SOCKET=/run/dualpath/dpl-$node.sock")
    fi
    "$lab" exec "$node" env "${env[@]}" "$harness" --plugin "$plugin" --version 12 \
      --scenario stream --rank "$r" --exchange "$ex" --rounds "$rounds" --bytes "$bytes" \
      --traffic-class "${DP_TC:--1}" \
      >"$ex/r$r.out" 2>"$ex/r$r.err" &
    pids+=($!)
  done
  if (($#)); then
    sleep 1.5
    "$lab" fault "$@" >/dev/null
    echo "$name: fault $* injected"
    sleep 2
    "$lab" fault clear >/dev/null
    echo "$name: fault cleared"
  fi
  local rc=0
  for i in 0 1; do
    if ! wait "${pids[$i]}"; then
      echo "FAIL: $name: rank $i failed:"
      tail -20 "$ex/r$i.err"
      rc=1
    fi
  done
  pids=()
  return $rc
}

# 1. bytes per rail against the placement
a0=$(tx_bytes a rail0)
a1=$(tx_bytes a rail1)
rounds=16
# with dualpathd: long enough for the scheduler to see the plugin's load
((${#daemon_opt[@]})) || rounds=48
run_pair split "$rounds" 8388608
b0=$(tx_bytes a rail0)
b1=$(tx_bytes a rail1)
placed=$(grep 'placed in class' "$work/split/r0.err" | tail -1 || true)
[[ -n $placed ]] || { echo "FAIL: rank 0 logged no placement"; exit 1; }
echo "rank 0: ${placed#*NET/dualpath : }"
if ! ((${#daemon_opt[@]})); then
  # dualpathd counts the plugin's bytes in expert-combine's demand: rail0
  # (its preferred rail, 1 Gbit) runs hot and the class spills to rail1
  spill=$(grep -h 'moved in class expert-combine (operation alltoall): rail0 [1-9][0-9]*%, rail1 [1-9]' \
    "$work/split/r0.err" | head -1 || true)
  [[ -n $spill ]] || {
    echo "FAIL: the plugin's load never spilled expert-combine to both rails:"
    grep -h 'placed in\|moved in' "$work/split/r0.err" | sed 's/.*NET\/dualpath : /  /'
    "$lab" dpctl a events | tail -10
    exit 1
  }
  echo "rank 0: ${spill#*NET/dualpath : }"
  "$lab" dpctl a events | grep -A1 'expert-combine  spill' | head -2
elif grep -q ': moved in class' "$work/split/r0.err"; then
  # dualpathd's scheduler changed the class's decision during the run
  echo "the decision changed during the run: bytes per rail not compared"
  grep -h ': moved in class' "$work/split/r0.err" | sed 's/.*NET\/dualpath : /  /' | head -3
else
python3 - "$((b0 - a0))" "$((b1 - a1))" "$placed" <<'PY'
import re, sys
r0, r1, line = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
share = dict(re.findall(r"(rail\d) (\d+)%", line))
want0 = int(share["rail0"]) / 100
got0 = r0 / (r0 + r1)
print(f"node a sent {r0/2**20:.1f} MiB on rail0 and {r1/2**20:.1f} MiB on rail1: "
      f"rail0 {got0:.1%}, the decision {want0:.0%}")
for name, got, want in (("rail0", got0, want0), ("rail1", 1 - got0, 1 - want0)):
    if want > 0 and abs(got - want) > 0.10 * want:
        sys.exit(f"FAIL: {name} carried {got:.1%}, the decision {want:.0%} (more than 10% apart)")
PY
fi
tail -1 "$work/split/r0.out"

# 2. a blackhole of rail0 (node a's ingress) mid-transfer, 3. its carrier lost
for fault in "blackhole rail0" "down rail0"; do
  name=${fault%% *}
  # shellcheck disable=SC2086 # the fault's words are dp-lab fault's arguments
  # past the fault at 1.5 s: without dualpathd a round is 30 ms (48 rounds
  # ended before it on a quiet machine), with it 170 ms (rail0 held down)
  fault_rounds=96
  ((${#daemon_opt[@]})) || fault_rounds=48
  run_pair "$name" "$fault_rounds" 4194304 a $fault
  for r in 0 1; do
    summary=$(tail -1 "$work/$name/r$r.out")
    echo "$name rank $r: $summary"
    grep -q '"ok":true' <<<"$summary" || { echo "FAIL: $name rank $r"; exit 1; }
  done
  moves=$(cat "$work/$name/r0.err" "$work/$name/r1.err" | grep -c 'move to' || true)
  if grep -q 'placed in class.*rail0 0% (down)' "$work/$name/r0.err"; then
    # dualpathd holds rail0 down after the previous fault (the lab policy's holddown)
    echo "$name: dualpathd had rail0 down from the start (holddown): nothing on it to move"
  else
    ((moves > 0)) || { echo "FAIL: $name: the plugin never moved chunks off rail0"; exit 1; }
  fi
  { grep -h 'move to\|reopened\|every rail failed' "$work/$name"/r*.err || true; } |
    sed 's/.*NET\/dualpath : /  /' | head -8
done
# 4. IPv6 (without dualpathd, the shared topology): the rails named by their
# IPv6 addresses; every byte checked, both rails carry by the placement
if ((${#daemon_opt[@]})) && [[ $topology == shared ]]; then
  a0=$(tx_bytes a rail0)
  a1=$(tx_bytes a rail1)
  DP_V6=1 run_pair v6 8 4194304
  b0=$(tx_bytes a rail0)
  b1=$(tx_bytes a rail1)
  summary=$(tail -1 "$work/v6/r0.out")
  grep -q '"ok":true' <<<"$summary" || { echo "FAIL: IPv6 rank 0: $summary"; exit 1; }
  grep -q 'fd98' "$work/v6/r0.err" || { echo "FAIL: IPv6: rank 0 never logged an fd98:: address"; grep -h 'rail' "$work/v6/r0.err" | head -5; exit 1; }
  python3 - $((b0 - a0)) $((b1 - a1)) $((8 * 4194304)) <<'PY' || exit 1
import sys
r0, r1, sent = map(int, sys.argv[1:])
print(f"IPv6: node a sent {r0/2**20:.1f} MiB on rail0 and {r1/2**20:.1f} MiB on rail1 "
      f"({sent/2**20:.0f} MiB of payload), every byte checked")
if r0 + r1 < sent:
    sys.exit("FAIL: IPv6: the rails carried less than the payload")
if min(r0, r1) < 0.05 * sent:
    sys.exit("FAIL: IPv6: one rail carried (almost) nothing")
PY
  grep -h 'fd98' "$work/v6/r0.err" | sed 's/.*NET\/dualpath : /  /' | head -2
fi
# 5. with dualpathd: the class by operation, and by the communicator's traffic class first
if ! ((${#daemon_opt[@]})); then
  run_pair op 4 4194304
  grep -q 'placed in class expert-combine (operation alltoall)' "$work/op/r0.err" ||
    { echo "FAIL: alltoall was not placed in expert-combine"; grep -h 'placed' "$work/op/r0.err"; exit 1; }
  DP_TC=3 run_pair tc 4 4194304
  grep -q 'placed in class param-sync (the communicator.s traffic class 3)' "$work/tc/r0.err" ||
    { echo "FAIL: traffic class 3 was not placed in param-sync"; grep -h 'placed' "$work/tc/r0.err"; exit 1; }
  grep -h 'placed in class [a-z]' "$work/op/r0.err" "$work/tc/r0.err" | sed 's/.*NET\/dualpath : /  /'
  # the plugin's reports: node a's dualpathd counts rank 0's bytes in their
  # class (4 rounds of 4 MiB in expert-combine, in the op run)
  "$lab" dpctl a -j class list >"$work/classes.json"
  python3 - "$work/classes.json" $((4 * 4194304)) <<'PY' || exit 1
import json, sys
classes = json.load(open(sys.argv[1]))
classes = classes.get("data", classes) if isinstance(classes, dict) else classes
by = {c["name"]: c for c in (classes["classes"] if isinstance(classes, dict) else classes)}
got = sum(by["expert-combine"]["nccl_tx_bytes_by_path"].values())
print(f"dualpathd on a counts {got} bytes of the plugin in expert-combine "
      f"({by['expert-combine']['nccl_tx_bytes_by_path']}); rank 0 sent {sys.argv[2]}")
if got < int(sys.argv[2]):
    sys.exit("FAIL: the plugin's reported bytes are missing from dpctl class list")
PY
  # dpctl flow list: the plugin's streams are not classified in the flow
  # table; its processes are listed with what they sent (within 30 s)
  "$lab" dpctl a -j flow list --class expert-combine >"$work/flows.json"
  python3 - "$work/flows.json" $((4 * 4194304)) <<'PY' || exit 1
import json, sys
flows = json.load(open(sys.argv[1]))
procs = flows.get("nccl", [])
best = max(((sum(s["bytes"] for s in p["sent"]), p) for p in procs), key=lambda b: b[0],
           default=(0, None))
if best[0] < int(sys.argv[2]):
    sys.exit(f"FAIL: no NCCL plugin process with {sys.argv[2]} bytes of expert-combine in "
             f"dpctl flow list: {json.dumps(procs)[:400]}")
p = best[1]
if any(s["class"] != "expert-combine" for q in procs for s in q["sent"]):
    sys.exit("FAIL: flow list --class expert-combine lists another class's bytes")
print(f"dpctl flow list on a: {len(procs)} plugin processes, pid {p['pid']} ({p['process']}) "
      f"sent {best[0]} bytes of expert-combine, "
      + ", ".join(f"{s['path']} {s['bytes']}" for s in p["sent"]))
PY
  # and its moves (the blackhole's rail0 failed) among dualpathd's events
  "$lab" dpctl a -j events >"$work/events.json"
  python3 - "$work/events.json" <<'PY' || exit 1
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev.get("data", ev)
nccl = [e for e in ev["events"] if e["kind"] == "nccl"]
if not any("failed" in e["reason"] for e in nccl):
    sys.exit("FAIL: no NCCL plugin move in dpctl events: " + json.dumps(nccl[:3]))
print(f"dpctl events on a: {len(nccl)} of the plugin's moves, e.g. {nccl[0]['reason']}")
PY
  # a class the running policy lacks: init fails with the classes there are
  if ! "$lab" exec a env NCCL_DUALPATH_SOCKET=/run/dualpath/dpl-a.sock NCCL_DUALPATH_CLASS=no-such \
    "$harness" --plugin "$plugin" --version 12 --scenario badenv >"$work/badclass.log" 2>&1; then
    echo "FAIL: NCCL_DUALPATH_CLASS=no-such was not refused"
    cat "$work/badclass.log"
    exit 1
  fi
  grep -h 'WARN.*NCCL_DUALPATH_CLASS' "$work/badclass.log" | sed 's/.*NET\/dualpath : /  /'
fi
echo "lab_nccl: every byte intact, rails as decided, rail0's blackhole and carrier loss survived"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dualpathd where its run directory (/run/dualpath) is full and where its pin
# directory is read-only, as a node's disk or a container's mounts can leave
# them, on a node of its own: a network namespace with two veth rails, in a
# mount namespace of the test's own, so that the full tmpfs and the read-only
# bpffs are seen by nothing else.
#  - the pin directory read-only at start: refused with the directory and the
#    reason, and nothing half-applied (rules, routes, qdiscs, filters, pins,
#    BPF programs, the control socket);
#  - /run/dualpath out of inodes (the control socket cannot be made): refused
#    the same way, before the kernel is touched;
#  - /run/dualpath out of space: the daemon starts and steers, and a multipath
#    class's net.mptcp settings are left as they were (their earlier values
#    could not be kept for --cleanup), which `dpctl status` says;
#  - the pin directory made read-only under a running daemon: a reload is
#    refused with the reason and the running policy steers on; a restart is
#    refused and the datapath left pinned steers on; --cleanup (once the
#    directory is writable) leaves the node as it was.
# Usage: run_and_pins.sh DUALPATHD DPCTL (as root; exit 77 where the machine
# cannot make namespaces).
set -uo pipefail
if [[ -z ${DP_RUN_AND_PINS_NS:-} ]]; then
  [[ $(id -u) == 0 ]] || { echo "skipped: needs root"; exit 77; }
  DP_RUN_AND_PINS_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
dualpathd=$1 dpctl=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
ns=dpt-run$$
tmp=$(mktemp -d /tmp/dp-run-and-pins.XXXXXX)
bpffs=$tmp/bpffs policy=$tmp/node.toml pid=
fails=0

cleanup() {
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid"
    wait "$pid" 2>/dev/null
  fi
  if [[ -n $pid ]]; then
    mount -o remount,rw "$bpffs" 2>/dev/null
    in_ns "$dualpathd" --policy "$policy" --bpffs "$bpffs" --cleanup >/dev/null 2>&1
  fi
  umount "$bpffs" /run/dualpath 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

ok() { echo "ok   $1"; }
fail() {
  echo "FAIL $1"
  fails=$((fails + 1))
}
in_ns() { nsenter --net="/run/netns/$ns" "$@"; }

if ! ip netns add "$ns" 2>/dev/null; then
  echo "skipped: cannot make a network namespace"
  exit 77
fi
in_ns ip link set lo up
in_ns ip addr add 10.99.0.1/32 dev lo
in_ns ip addr add fd99::1/128 dev lo
for i in 0 1; do
  in_ns ip link add "rail$i" type veth peer name "peer$i"
  in_ns ip addr add "10.98.$i.1/24" dev "rail$i"
  in_ns ip addr add "fd98:$i::1/64" dev "rail$i" nodad
  in_ns ip link set "rail$i" up
  in_ns ip link set "peer$i" up
done
# The kernel gives each veth an IPv6 link-local address, and its route in
# table local, a moment after the link comes up: wait for all four, so that
# they are in every footprint's "before" and not taken for something left.
for _ in $(seq 50); do
  [[ $(in_ns ip -6 route show table local | grep -c '^local fe80::') -ge 4 &&
    -z $(in_ns ip -6 addr show tentative) ]] && break
  sleep 0.1
done
# the lab's node a, named for this test, with a multipath class
sed -e 's/^name = "dpl-a"/name = "'"$ns"'"/' "$src/policies/lab-a.toml" >"$policy"
cat >>"$policy" <<'EOF'

[[class]]
name = "collective"
kind = "elastic"
priority = 4
prefer = "rail0"
multipath = true
cgroups = ["/dpt-run-collective"]
EOF

# What dualpath could have made on the node, as text equal when nothing changed.
footprint() {
  local dev
  in_ns ip rule show
  in_ns ip -6 rule show
  in_ns ip route show table all
  in_ns ip -6 route show table all
  for dev in rail0 rail1; do
    in_ns tc qdisc show dev "$dev"
    in_ns tc filter show dev "$dev" ingress
    in_ns tc filter show dev "$dev" egress
  done
  in_ns sysctl -n net.mptcp.enabled net.mptcp.path_manager 2>/dev/null
  find "$bpffs" /run/dualpath 2>/dev/null | sort
}
# BPF programs named as dualpath's (dp_...) loaded anywhere: the lab's
# daemons, when they run, keep theirs, so the count is what is compared.
programs() { bpftool prog show 2>/dev/null | grep -c ' name dp_'; }

mkdir -p "$bpffs" /run/dualpath
mount -t tmpfs -o size=1m,mode=0755 tmpfs /run/dualpath
mount -t bpf -o ro,mode=0700 bpf "$bpffs"
progs=$(programs)

# A start that must be refused: exit 1 naming WHERE and WHY, and nothing of
# it left on the node.
# expect_refused WHAT WHERE WHY
expect_refused() {
  local what=$1 where=$2 why=$3 before out rc
  before=$(footprint)
  out=$(timeout 30 nsenter --net="/run/netns/$ns" "$dualpathd" --policy "$policy" \
    --bpffs "$bpffs" 2>&1)
  rc=$?
  if [[ $rc == 1 && $out == *"$where"* && $out == *"$why"* ]]; then
    ok "$what: start refused: ${out##*error }"
  else
    fail "$what: rc $rc, output: $out"
  fi
  if [[ $(footprint) == "$before" && $(programs) == "$progs" ]]; then
    ok "... and nothing of it is left: rules, routes, qdiscs, filters, pins, programs, socket"
  else
    fail "... something was left:"$'\n'"$(diff <(echo "$before") <(footprint))"
  fi
}

# 1. the pin directory read-only at start
expect_refused "a read-only pin directory" "$bpffs/dualpath" "Read-only file system"
mount -o remount,rw "$bpffs"

# 2. /run/dualpath without a free inode: the control socket cannot be made,
#    and the kernel is not touched
umount /run/dualpath
mount -t tmpfs -o size=1m,nr_inodes=8,mode=0755 tmpfs /run/dualpath
for ((n = 0; n < 8; n++)); do : 2>/dev/null >"/run/dualpath/filler$n" || break; done
expect_refused "/run/dualpath out of inodes" "/run/dualpath/dualpathd.sock" "No space left"

# 3. /run/dualpath out of space: the daemon starts and steers; the MPTCP
#    settings are left as they were, and status says why
umount /run/dualpath
mount -t tmpfs -o size=64k,mode=0755 tmpfs /run/dualpath
dd if=/dev/zero of=/run/dualpath/filler bs=4k 2>/dev/null
before=$(in_ns sysctl -n net.mptcp.enabled net.mptcp.path_manager)
log=$tmp/dualpathd.log
nsenter --net="/run/netns/$ns" "$dualpathd" --policy "$policy" --bpffs "$bpffs" >"$log" 2>&1 &
pid=$!
status=
for ((n = 0; n < 100; n++)); do
  status=$("$dpctl" -j status 2>/dev/null) && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [[ -n $status ]] && in_ns tc filter show dev rail0 egress | grep -q dp_; then
  ok "/run/dualpath full: the daemon started, and its programs are attached"
else
  fail "/run/dualpath full: no daemon; its log: $(cat "$log")"
fi
error=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["multipath"]["error"])' \
  <<<"$status" 2>/dev/null)
after=$(in_ns sysctl -n net.mptcp.enabled net.mptcp.path_manager)
if [[ $error == *"could not be kept"* && $after == "$before" ]]; then
  ok "... multipath not ready, its settings unchanged: $error"
else
  fail "... multipath: error \"$error\", net.mptcp ${before//$'\n'/ } -> ${after//$'\n'/ }"
fi
rm -f /run/dualpath/filler

# 4. the pin directory made read-only under the running daemon: a reload is
#    refused (the kernel opens a pinned link for writing only) and the
#    running policy goes on steering, with its programs and links in place
links() { find "$bpffs" -name 'link_*' | sort | while read -r l; do bpftool link show pinned "$l"; done; }
filters=$(in_ns tc filter show dev rail0 egress) pinned=$(links)
mount -o remount,ro "$bpffs"
sed -i 's/^priority = 4$/priority = 2/' "$policy"
reload=$("$dpctl" policy reload 2>&1)
rc=$?
if [[ $rc == 1 && $reload == *"Read-only file system"* && $reload == *"running policy"*"stays"* ]]
then
  ok "a read-only pin directory under a running daemon: a reload is refused: $reload"
else
  fail "a reload with the pin directory read-only: rc $rc: $reload"
fi
# (a pinned link cannot be read on the read-only mount: the links after it)
mount -o remount,rw "$bpffs"
if kill -0 "$pid" 2>/dev/null && [[ $(in_ns tc filter show dev rail0 egress) == "$filters" ]] &&
  [[ $(links) == "$pinned" ]] && "$dpctl" -j class list | grep -q '"priority":4'; then
  ok "... and the running policy steers on: its filters, its links, its classes"
else
  fail "... the running policy changed; log: $(tail -5 "$log")"
fi

# 5. a restart where the pins are read-only: refused, and the datapath the
#    daemon before it left pinned goes on steering
kill "$pid"
wait "$pid" 2>/dev/null
if grep -qE 'Sanitizer|runtime error:' "$log"; then  # a sanitizer build's report
  fail "the daemon's exit: $(grep -E -A5 'Sanitizer|runtime error:' "$log" | head -20)"
fi
mount -o remount,ro "$bpffs"
out=$(timeout 30 nsenter --net="/run/netns/$ns" "$dualpathd" --policy "$policy" --bpffs "$bpffs" 2>&1)
rc=$?
mount -o remount,rw "$bpffs"
if [[ $rc == 1 && $out == *"Read-only file system"* ]] &&
  [[ $(in_ns tc filter show dev rail0 egress) == "$filters" && $(links) == "$pinned" ]]; then
  ok "a restart on read-only pins: refused (${out##*error }), the pinned datapath steers on"
else
  fail "a restart on read-only pins: rc $rc, output: $out"
fi

# 6. --cleanup, once the directory is writable again, leaves the node as it was
in_ns "$dualpathd" --policy "$policy" --bpffs "$bpffs" --cleanup >/dev/null 2>&1
pid=
before_all=$(
  in_ns ip rule show | grep -c .
  in_ns tc filter show dev rail0 egress | grep -c dp_
)
if [[ $before_all == $'3\n0' && $(programs) == "$progs" ]]; then
  ok "--cleanup removed what the daemon made"
else
  fail "--cleanup left: $before_all; programs $(programs) (before $progs)"
fi

echo "$fails failed"
((fails == 0))

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Two PyTorch ranks on one GPU, set apart as two hosts (NCCL_HOSTID), their
# NCCL traffic through dualpath's net plugin (NCCL_NET_PLUGIN; NCCL_NET
# makes NCCL fail rather than fall back to its own transports):
# all_to_all_single and batched send/recv from 64 KiB to 64 MiB, checked
# (torch_nccl.py). As root, each rank runs in a network namespace of its own
# joined by two veth rails (rail0 10.77.0.0/24, rail1 10.77.1.0/24), node a's
# bytes per rail are counted, and with --fault rail0 is taken down 3 s into
# the run and back 2 s later; elsewhere the two rails are two loopback
# addresses. Skipped, with the reason, where there is no GPU or no PyTorch
# with NCCL.
#   torch_nccl.sh PLUGIN.so [--fault]
set -euo pipefail
plugin=$(realpath "${1:?usage: torch_nccl.sh libnccl-net-dualpath.so [--fault]}")
fault=${2:-}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PYTHON:-python3}

skip() { echo "skipped: $*"; exit 77; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  skip "no NVIDIA GPU here"
fi
"$py" -c 'import torch, torch.distributed as d, sys
sys.exit(0 if torch.cuda.is_available() and d.is_nccl_available() else 1)' 2>/dev/null ||
  skip "no PyTorch with CUDA and NCCL for $py"

work=$(mktemp -d /tmp/dp-torch-nccl.XXXXXX)
netns=0
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if ((netns)); then ip netns del dpn-a 2>/dev/null || true; ip netns del dpn-b 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# two namespaces joined by two veth rails, where root may make them
if [[ $(id -u) == 0 ]] && ip netns add dpn-a 2>/dev/null; then
  netns=1
  ip netns add dpn-b
  for i in 0 1; do
    ip link add "rail$i" netns dpn-a type veth peer name "rail$i" netns dpn-b
    ip -n dpn-a addr add "10.77.$i.1/24" dev "rail$i"
    ip -n dpn-b addr add "10.77.$i.2/24" dev "rail$i"
    ip -n dpn-a link set "rail$i" up
    ip -n dpn-b link set "rail$i" up
  done
  ip -n dpn-a link set lo up
  ip -n dpn-b link set lo up
  master=10.77.0.1
  rails=rail0@10Gbit,rail1@10Gbit
else
  master=127.0.0.1
  rails=lo=127.0.0.1,lo=127.0.0.2
fi

common=(
  NCCL_NET_PLUGIN=dualpath "LD_LIBRARY_PATH=$(dirname "$plugin"):${LD_LIBRARY_PATH:-}"
  NCCL_NET=dualpath NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,NET"
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0 NCCL_CUMEM_ENABLE=0
  "NCCL_DUALPATH_RAILS=$rails" NCCL_DUALPATH_DAEMON=0
  "MASTER_ADDR=$master" MASTER_PORT=29517 WORLD_SIZE=2 LOCAL_GPU=0
)
tx() { ip -n dpn-a -j -s link show dev "$1" | "$py" -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])'; }
((netns)) && { t0=$(tx rail0); t1=$(tx rail1); }
for r in 0 1; do
  run=()
  ((netns)) && run=(ip netns exec "dpn-$([[ $r == 0 ]] && echo a || echo b)")
  "${run[@]}" env "${common[@]}" RANK=$r NCCL_HOSTID="dualpath-node-$r" \
    "$py" "$here/torch_nccl.py" >"$work/r$r.out" 2>"$work/r$r.log" &
  pids+=($!)
done
if [[ $fault == --fault ]]; then
  ((netns)) || skip "--fault needs the namespaces (root)"
  sleep 3
  ip -n dpn-a link set rail0 down
  echo "rail0 down"
  sleep 2
  ip -n dpn-a link set rail0 up
  echo "rail0 up"
fi
rc=0
for i in 0 1; do wait "${pids[$i]}" || rc=1; done
pids=()
cat "$work/r0.out"
grep -h 'NET/dualpath\|Using network' "$work/r0.log" | head -20
if ! grep -q 'Using network dualpath' "$work/r0.log"; then
  echo "FAIL: NCCL did not use the dualpath plugin"; rc=1
fi
if ((netns)); then
  echo "node a sent $(($(tx rail0) - t0)) bytes on rail0 and $(($(tx rail1) - t1)) on rail1"
fi
((rc == 0)) || { echo "FAIL: a rank failed"; tail -30 "$work/r0.log" "$work/r1.log"; }
exit $rc

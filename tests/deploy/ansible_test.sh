#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/ansible end to end, with Debian's ansible, against three real nodes:
# systemd-nspawn containers booted from this machine's /usr on a tmpfs root,
# with overlays over /usr and /var (so that the package
# installs inside, and its dependencies are found installed, without
# touching the host), each with a private network and two veth rails. Ansible reaches them with
# the community.docker.nsenter connection (nsenter into each container's
# PID 1) instead of ssh. The test:
#   1. rolls out the package and each node's policy (rendered from
#      tests/deploy/ansible/cluster.toml): every node runs its policy
#   2. runs it again: nothing changes
#   3. runs --check --diff with a changed description: the diff is shown,
#      nothing changes
#   4. rolls out rendered policies of which the canary's fails dpctl policy
#      check on the node: the play stops at the canary, every node unchanged
#   5. rolls out a description that leaves a rail down, so the canary fails
#      its health gate: its previous policy is back, the play stops, the
#      other nodes unchanged
# DP_ANSIBLE_LOGS=DIR keeps the playbooks' output. Needs the Debian package (tools/quickstart package, or
# tests/package/check.sh, leaves it in BUILD_DIR).
#
#   tests/deploy/ansible_test.sh BUILD_DIR
set -uo pipefail
build=$(cd "${1:?usage: ansible_test.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
command -v systemd-nspawn >/dev/null || { echo "skipped: no systemd-nspawn"; exit 0; }
command -v ansible-playbook >/dev/null || { echo "ansible is not installed (tools/quickstart installs it)"; exit 1; }
deb=$(ls "$build"/dualpath_*_amd64.deb 2>/dev/null | head -1)
[[ -f $deb ]] || { echo "no $build/dualpath_*_amd64.deb: run tools/quickstart package first"; exit 1; }
if dpkg-query -W -f='${Status}' dualpath 2>/dev/null | grep -q 'install ok installed'; then
  echo "dualpath is installed on this machine; the containers would see it: skipped"
  exit 0
fi

fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
dpctl=$build/tools/dpctl/dpctl
work=$(mktemp -d)
nodes=(n1 n2 n3)
declare -A nspawn leader host=([n1]=11 [n2]=12 [n3]=13)

cleanup() {
  local n
  for n in "${nodes[@]}"; do [[ -n ${nspawn[$n]:-} ]] && kill -TERM "${nspawn[$n]}" 2>/dev/null; done
  for n in "${nodes[@]}"; do
    [[ -n ${nspawn[$n]:-} ]] || continue
    for _ in $(seq 50); do kill -0 "${nspawn[$n]}" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "${nspawn[$n]}" 2>/dev/null
    wait "${nspawn[$n]}" 2>/dev/null
    rm -rf "/run/systemd/nspawn/propagate/dpans-$$-$n"
  done
  # DP_ANSIBLE_LOGS=DIR keeps each playbook's output (1.log ... 5.log)
  [[ -n ${DP_ANSIBLE_LOGS:-} ]] && mkdir -p "$DP_ANSIBLE_LOGS" && cp "$work"/[0-9].log "$DP_ANSIBLE_LOGS"/ 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# The units of the package look for pins under /sys/fs/bpf, which nspawn's
# /sys lacks: each node gets a bpffs of its own and a drop-in pointing the
# daemon at it (the node's preparation, as a real host has its bpffs).
mkdir -p "$work/dropin"
printf '[Service]\nReadWritePaths=/run/dptest-bpf\nExecStart=\nExecStart=/usr/sbin/dualpathd --policy /etc/dualpath/policy.toml --socket /run/dualpath/dualpathd.sock --bpffs /run/dptest-bpf\n' \
  >"$work/dropin/test.conf"
for n in "${nodes[@]}"; do
  mkdir -p "$work/$n/usr" "$work/$n/var"
  systemd-nspawn --directory=/ --volatile=yes --register=no --keep-unit --private-network \
    --overlay="/usr:$work/$n/usr:/usr" --overlay="/var:$work/$n/var:/var" \
    --bind-ro=/etc/apt --bind-ro=/etc/dpkg --bind-ro=/etc/passwd --bind-ro=/etc/group \
    --machine="dpans-$$-$n" --hostname="$n" --capability=CAP_BPF,CAP_PERFMON \
    --system-call-filter='bpf perf_event_open' \
    --bind-ro="$work/dropin:/run/dptest-dropin" \
    --bind-ro=/dev/null:/etc/systemd/system/systemd-firstboot.service \
    --bind-ro=/dev/null:/etc/systemd/system/systemd-networkd-wait-online.service \
    --boot systemd.unit=multi-user.target >"$work/$n.log" 2>&1 &
  nspawn[$n]=$!
done
in_n() { local n=$1; shift; timeout 60 nsenter --target "${leader[$n]}" --mount --uts --ipc --net --pid -- "$@"; }
for n in "${nodes[@]}"; do
  for _ in $(seq 100); do
    leader[$n]=$(pgrep -P "${nspawn[$n]}" -x systemd | head -1)
    [[ -n ${leader[$n]} ]] && break
    sleep 0.2
  done
  [[ -n ${leader[$n]} ]] || { echo "$n did not boot:"; cat "$work/$n.log"; exit 1; }
done
for n in "${nodes[@]}"; do
  for _ in $(seq 300); do
    st=$(in_n "$n" systemctl is-system-running 2>/dev/null)
    [[ $st == running || $st == degraded ]] && break
    sleep 0.2
  done
  # two rails, a spare link without carrier, a bpffs, the drop-in
  in_n "$n" sh -ec "
    mkdir -p /run/dptest-bpf && mount -t bpf bpf /run/dptest-bpf
    for i in 0 1; do
      ip link add rail\$i type veth peer name peer\$i
      ip addr add 10.7\$i.0.${host[$n]}/24 dev rail\$i
      ip link set rail\$i up; ip link set peer\$i up
    done
    ip link add spare0 type veth peer name sparepeer0
    ip addr add 10.71.0.${host[$n]}/24 dev spare0
    ip link set spare0 up
    mkdir -p /etc/systemd/system/dualpathd.service.d
    cp /run/dptest-dropin/test.conf /etc/systemd/system/dualpathd.service.d/"
done
ok "3 nodes booted (systemd in nspawn, $st), each with rails rail0 and rail1"

cat >"$work/inventory" <<EOF
[dualpath]
$(for n in "${nodes[@]}"; do echo "$n ansible_nsenter_pid=${leader[$n]}"; done)

[dualpath_canary]
n1

[dualpath:vars]
ansible_connection=community.docker.nsenter
ansible_python_interpreter=/usr/bin/python3
dualpath_deb=$deb
dualpath_controller_dpctl=$dpctl
dualpath_gate_retries=5
dualpath_gate_delay=1

[local]
localhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3
EOF
export ANSIBLE_NOCOLOR=1 ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_RETRY_FILES_ENABLED=False \
  ANSIBLE_LOCAL_TEMP=$work/ansible-local ANSIBLE_STDOUT_CALLBACK=default
play() { # LOG ARGS...: the rollout playbook; its output in LOG, exit status returned
  local log=$1
  shift
  local t0=$SECONDS
  ansible-playbook -i "$work/inventory" "$src/deploy/ansible/rollout.yml" "$@" >"$log" 2>&1
  local rc=$?
  echo "     (ansible-playbook $* : rc $rc, $((SECONDS - t0)) s)" | sed "s|$work/||g"
  return $rc
}
running() { in_n "$1" /usr/bin/dpctl -j status 2>/dev/null | sed -n 's/.*"policy":{[^}]*"hash":"\([0-9a-f]*\)".*/\1/p'; }
rendered() { "$dpctl" -j policy render "$1" --node "$2" | sed -n 's/.*"hash":"\([0-9a-f]*\)".*/\1/p'; }
recap() { sed -n '/PLAY RECAP/,$p' "$1"; }
all_run() { # CLUSTER: every node runs its policy from it
  local n
  for n in "${nodes[@]}"; do [[ $(running "$n") == "$(rendered "$1" "$n")" ]] || return 1; done
}
v1=$src/tests/deploy/ansible/cluster.toml

# 1. first rollout
if play "$work/1.log" -e "dualpath_cluster=$v1" && all_run "$v1"; then
  ok "first rollout: the package is installed and every node runs its policy"
  in_n n2 dpkg-query -W -f='    n2: ${Package} ${Version} installed\n' dualpath
else
  bad "first rollout: $(tail -30 "$work/1.log")"
fi
recap "$work/1.log"

# 2. again: nothing changes
if play "$work/2.log" -e "dualpath_cluster=$v1" && ! recap "$work/2.log" | grep -q 'changed=[1-9]'; then
  ok "second rollout: nothing changed ($(recap "$work/2.log" | grep -c 'changed=0') hosts changed=0)"
else
  bad "second rollout changed something: $(recap "$work/2.log")"
fi

# 3. --check --diff of a changed description: shown, not done
sed 's/^load_threshold = 0.6/load_threshold = 0.7/' "$v1" >"$work/v2.toml"
if play "$work/3.log" -e "dualpath_cluster=$work/v2.toml" --check --diff &&
  grep -q '^-load_threshold = 0.6' "$work/3.log" && grep -q '^+load_threshold = 0.7' "$work/3.log" &&
  all_run "$v1"; then
  ok "--check --diff: each node's diff shown ($(grep -c '^+load_threshold = 0.7' "$work/3.log") nodes), nothing changed"
  grep -B2 -A2 '^+load_threshold = 0.7' "$work/3.log" | head -6 | sed 's/^/    /'
else
  bad "--check --diff: $(tail -30 "$work/3.log")"
fi

# 4. rendered policies, the canary's refused by dpctl policy check on the node
"$dpctl" policy render "$work/v2.toml" --all "$work/rendered" >/dev/null
sed -i 's/^load_threshold = 0.7/load_threshold = nan/' "$work/rendered/n1.toml"
if ! play "$work/4.log" -e "dualpath_policy_dir=$work/rendered" && all_run "$v1" &&
  grep -q 'failed to validate' "$work/4.log" && ! grep -q '^ok: \[n2\]\|^changed: \[n2\]' "$work/4.log"; then
  ok "a policy that fails dpctl policy check stops the rollout at the canary; no node changed, n2 and n3 not reached"
  grep -m1 -A1 'fatal: \[n1\]' "$work/4.log" | cut -c1-300 | sed 's/^/    /'
else
  bad "a refused policy: $(tail -30 "$work/4.log")"
fi
recap "$work/4.log"

# 5. a description that moves rail1 to a link without carrier (spare0, whose
#    peer is down): the daemon takes it, the rail is down, the canary's
#    health gate fails and its previous policy comes back
sed 's/^interface = "rail1"/interface = "spare0"/' "$v1" >"$work/v3.toml"
if ! play "$work/5.log" -e "dualpath_cluster=$work/v3.toml" && all_run "$v1" &&
  grep -q 'The previous policy is back' "$work/5.log" && ! grep -q '^ok: \[n2\]\|^changed: \[n2\]' "$work/5.log"; then
  ok "a canary that fails its health gate is rolled back and the rollout stops; n2 and n3 not reached"
  grep -m1 'fatal: \[n1\].*Stop the rollout\|"msg": "n1:' "$work/5.log" | cut -c1-300 | sed 's/^/    /'
  grep -A1 'TASK \[dualpath : Health gate\]' "$work/5.log" | tail -1 | cut -c1-200 | sed 's/^/    /'
else
  bad "a failed health gate: $(tail -40 "$work/5.log")"
fi
recap "$work/5.log"
exit $((fails > 0))

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The systemd unit under a real systemd: this machine's own /usr booted as
# PID 1 of a container (systemd-nspawn --volatile: a tmpfs root, /usr from
# the host, a private network namespace), with dualpathd.service as built
# (its hardening, capabilities and seccomp filter) and two veth rails.
#   start: Type=notify returns once the daemon is ready, and it serves
#   reload: a good policy is applied (systemctl reload exits 0); a refused
#           one makes systemctl reload fail and the running policy stays
#   watchdog: a daemon that stops answering is killed and restarted
#   stop: the datapath stays pinned and attached (steering goes on)
#   dualpath-remove.service: stops it and removes what it made
#
#   tests/systemd/unit_test.sh BUILD_DIR
set -uo pipefail
build=$(cd "${1:?usage: unit_test.sh BUILD_DIR}" && pwd)
command -v systemd-nspawn >/dev/null || { echo "skipped: no systemd-nspawn (systemd-container)"; exit 0; }
[[ -x /lib/systemd/systemd ]] || { echo "skipped: no systemd"; exit 0; }

machine=dptest-$$
log=$(mktemp)
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

# The units as installed, pointed at this build (bound at /opt/dp).
units=$(mktemp -d)
for u in dualpathd.service dualpath-remove.service; do
  sed -e "s|^\(Exec[A-Za-z]*=\)[^ ]*/dpctl|\1/opt/dp/tools/dpctl/dpctl|" \
      -e "s|^\(Exec[A-Za-z]*=\)[^ ]*/dualpathd|\1/opt/dp/daemon/dualpathd|" \
      "$build/$u" >"$units/$u"
done
# For the test: a short watchdog (the unit's is 10s), and pins on a bpffs of
# the container's own at /run/dptest-bpf (nspawn's /sys has no /sys/fs/bpf).
mkdir -p "$units/dualpathd.service.d" "$units/dualpath-remove.service.d"
exec_of() { sed -n "s|^ExecStart=||p" "$units/$1"; }
printf '[Service]\nWatchdogSec=3s\nReadWritePaths=/run/dptest-bpf\nExecStart=\nExecStart=%s --bpffs /run/dptest-bpf\n' \
  "$(exec_of dualpathd.service)" >"$units/dualpathd.service.d/test.conf"
printf '[Service]\nExecStart=\nExecStart=%s --bpffs /run/dptest-bpf\n' \
  "$(exec_of dualpath-remove.service)" >"$units/dualpath-remove.service.d/test.conf"

systemd-nspawn --directory=/ --volatile=yes --register=no --keep-unit --private-network \
  --machine="$machine" --capability=CAP_BPF,CAP_PERFMON --system-call-filter='bpf perf_event_open' \
  --bind-ro="$build:/opt/dp" --bind-ro="$units:/run/dptest-units" \
  --bind-ro=/dev/null:/etc/systemd/system/systemd-firstboot.service \
  --bind-ro=/dev/null:/etc/systemd/system/systemd-networkd-wait-online.service \
  --boot systemd.unit=multi-user.target >"$log" 2>&1 &
nspawn=$!
cleanup() {
  kill -TERM "$nspawn" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$nspawn" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$nspawn" 2>/dev/null
  wait "$nspawn" 2>/dev/null
  rm -rf "$units" "$log" "/run/systemd/nspawn/propagate/$machine"
}
trap cleanup EXIT INT TERM

leader=""
for _ in $(seq 100); do
  leader=$(pgrep -P "$nspawn" -x systemd | head -1)
  [[ -n $leader ]] && break
  sleep 0.2
done
[[ -n $leader ]] || { echo "the container did not boot:"; cat "$log"; exit 1; }
# every command inside gets a timeout: nothing may hang the test
in_c() { timeout 60 nsenter --target "$leader" --mount --uts --ipc --net --pid -- "$@"; }
for _ in $(seq 300); do
  st=$(in_c systemctl is-system-running 2>/dev/null)
  [[ $st == running || $st == degraded ]] && break
  sleep 0.2
done
ok "systemd $(in_c systemctl --version | head -1 | awk '{print $2}') is PID 1 of the container ($st)"

# a bpffs of the container's own (systemd mounts none in a container), two
# rails (veth pairs) and a policy for them
in_c sh -ec '
  mkdir -p /run/dptest-bpf
  mount -t bpf bpf /run/dptest-bpf
  ip link add rail0 type veth peer name peer0
  ip link add rail1 type veth peer name peer1
  for i in 0 1; do
    ip addr add 10.7$i.0.1/24 dev rail$i
    ip link set rail$i up; ip link set peer$i up
  done
  mkdir -p /etc/dualpath
  cp /run/dptest-units/dualpathd.service /run/dptest-units/dualpath-remove.service /etc/systemd/system/
  cp -r /run/dptest-units/dualpathd.service.d /run/dptest-units/dualpath-remove.service.d \
    /etc/systemd/system/
  systemctl daemon-reload'
policy() { # load_threshold
  cat <<EOF
[node]
name = "unit-test"
[scheduler]
load_threshold = $1
[health]
bfd = false
[[path]]
name = "rail0"
interface = "rail0"
gateway = "10.70.0.2"
source = "10.70.0.1"
capacity = "1Gbit"
table = 170
fwmark = 0x170
routes = ["10.99.0.0/24"]
[[path]]
name = "rail1"
interface = "rail1"
gateway = "10.71.0.2"
source = "10.71.0.1"
capacity = "1Gbit"
table = 171
fwmark = 0x171
routes = ["10.99.0.0/24"]
[[class]]
name = "bulk"
kind = "elastic"
prefer = "rail0"
ports = ["tcp:50000-50099"]
EOF
}
policy 0.6 | in_c tee /etc/dualpath/policy.toml >/dev/null
dpctl() { in_c /opt/dp/tools/dpctl/dpctl -s /run/dualpath/dualpathd.sock "$@"; }
show() { in_c systemctl show dualpathd.service -p "$1" --value; }

# start: notify
if in_c timeout 60 systemctl start dualpathd.service; then
  ok "systemctl start returned (Type=notify: READY=1 was sent); $(show ActiveState)/$(show SubState)"
else
  bad "systemctl start failed: $(in_c journalctl -u dualpathd --no-pager | tail -15)"
fi
hash=$(dpctl -j policy show 2>/dev/null | sed -n 's/.*"hash":"\([0-9a-f]*\)".*/\1/p')
[[ -n $hash ]] && ok "dpctl answers over the unit's socket (policy $hash)" || bad "dpctl status"
in_c tc filter show dev rail0 egress | grep -q dp_egress && ok "dp_egress attached on rail0" ||
  bad "no dp_egress on rail0"

# reload: good, then refused
policy 0.7 | in_c tee /etc/dualpath/policy.toml >/dev/null
if in_c systemctl reload dualpathd.service; then
  new=$(dpctl -j policy show | sed -n 's/.*"hash":"\([0-9a-f]*\)".*/\1/p')
  [[ $new != "$hash" ]] && ok "systemctl reload of a good policy: applied ($hash -> $new)" ||
    bad "reload did not change the policy"
  hash=$new
else
  bad "systemctl reload of a good policy failed: $(in_c journalctl --no-pager -u dualpathd | tail -12)"
fi
policy nan | in_c tee /etc/dualpath/policy.toml >/dev/null
if in_c systemctl reload dualpathd.service 2>/dev/null; then
  bad "systemctl reload of a refused policy succeeded"
else
  still=$(dpctl -j policy show | sed -n 's/.*"hash":"\([0-9a-f]*\)".*/\1/p')
  [[ $still == "$hash" && $(show ActiveState) == active ]] &&
    ok "systemctl reload of a refused policy failed; the running policy ($still) stays" ||
    bad "after a refused reload: hash $still, $(show ActiveState)"
fi
policy 0.7 | in_c tee /etc/dualpath/policy.toml >/dev/null

# watchdog: a daemon that stops answering is restarted
pid=$(show MainPID)
restarts=$(show NRestarts)
[[ $pid -gt 1 ]] && in_c kill -STOP "$pid"
for _ in $(seq 100); do
  [[ $(show MainPID) != "$pid" && $(show ActiveState) == active ]] && break
  sleep 0.2
done
if [[ $(show MainPID) != "$pid" && $(show NRestarts) -gt $restarts ]]; then
  ok "watchdog: pid $pid stopped answering, killed and restarted as $(show MainPID) (restarts $(show NRestarts))"
else
  bad "watchdog: no restart ($(show ActiveState), pid $(show MainPID))"
fi

# stop leaves steering; dualpath-remove removes it
in_c systemctl stop dualpathd.service
if in_c tc filter show dev rail0 egress | grep -q dp_egress && in_c test -e /run/dptest-bpf/dualpath/unit-test; then
  ok "systemctl stop: $(show ActiveState); dp_egress still attached and the pins kept"
else
  bad "systemctl stop removed the datapath"
fi
in_c systemctl start dualpathd.service
in_c systemctl start dualpath-remove.service
if [[ $(show ActiveState) == inactive ]] && ! in_c tc filter show dev rail0 egress | grep -q dp_egress &&
  ! in_c test -e /run/dptest-bpf/dualpath/unit-test; then
  ok "dualpath-remove.service: dualpathd stopped, filters and pins removed"
else
  bad "dualpath-remove.service: $(show ActiveState); $(in_c tc filter show dev rail0 egress | head -2)"
fi
denied=$(in_c journalctl --no-pager -u dualpathd 2>/dev/null | grep -ciE 'SIGSYS|seccomp|Operation not permitted' || true)
[[ $denied == 0 ]] && ok "no seccomp or permission denials in the journal" ||
  bad "$denied denials: $(in_c journalctl --no-pager -u dualpathd | grep -iE 'SIGSYS|seccomp|not permitted' | head -3)"
exit $((fails > 0))

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A node on an earlier release beside one on this build, as a rolling upgrade
# leaves a fleet for hours. Builds dualpathd at REV (default: the newest tag,
# else HEAD~10) from `git archive`, in a directory of its own that is kept
# for the next run, then runs this build's lab tests with one node's daemon
# from REV (tools/dp-lab's DP_LAB_DUALPATHD_A / _B):
#   - node b on REV, then node a on REV: the failover cases that need no
#     policy key newer than REV (BFD between the two, carrier loss, the
#     blackholes, 30% loss, both rails down) and the separate topology's
#     multipath cases;
#   - node b on REV: the soak (DP_SOAK_SECONDS, default 90), node a's
#     daemon killed, restarted and upgraded across map layouts meanwhile.
# It prints a line per run and exits non-zero if any failed; each run's
# output is in OUT. Not in CI: building REV takes minutes. A benchmark.
#   tests/lab/previous_release.sh [REV] [OUT]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${DP_BUILD:-$repo/build}
export DP_BUILD=$build
[[ $(id -u) == 0 ]] || { echo "the lab needs root" >&2; exit 1; }
if ip netns list | grep -qw dpl-a; then
  echo "a lab is already up; run 'tools/dp-lab down' first" >&2
  exit 1
fi
rev=${1:-$(git -C "$repo" describe --tags --abbrev=0 2>/dev/null || git -C "$repo" rev-parse HEAD~10)}
sha=$(git -C "$repo" rev-parse --verify "$rev^{commit}")
out=${2:-/tmp/dualpath-previous-release}
mkdir -p "$out"
prev=/var/tmp/dualpath-prev-${sha:0:12}
if [[ ! -x $prev/build/daemon/dualpathd ]]; then
  echo "building dualpathd at ${sha:0:12} in $prev (minutes)"
  rm -rf "$prev"
  mkdir -p "$prev/src"
  git -C "$repo" archive "$sha" | tar -x -C "$prev/src"
  cmake -S "$prev/src" -B "$prev/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBUILD_TESTING=OFF >"$out/build.log" 2>&1
  cmake --build "$prev/build" --target dualpathd >>"$out/build.log" 2>&1 ||
    { echo "building ${sha:0:12} failed: $out/build.log" >&2; exit 1; }
fi
old=$prev/build/daemon/dualpathd
echo "this build: $(git -C "$repo" rev-parse --short HEAD); the earlier: ${sha:0:12} ($old)"

failover='Failover.BfdSessionsComeUpBetweenTwoDaemons:Failover.CarrierLoss*:Failover.Blackhole*'
failover+=':Failover.OneWayBlackhole*:Failover.ThirtyPercentLoss*:Failover.BothRails*'
separate='Separate.AMultipathConnectionGetsASubflowOnEachRail*:Separate.AMultipathConnectionSurvives*'
separate+=':Separate.ConnectionsMadeAfterASpillCarryItsDecision'
failed=0
run() { # NAME VAR COMMAND...: the command with VAR=$old; a line for the result
  local name=$1 var=$2
  shift 2
  local t0=$SECONDS
  if env "$var=$old" "$@" >"$out/$name.log" 2>&1; then
    echo "pass  $name ($((SECONDS - t0)) s)"
  else
    echo "FAIL  $name ($((SECONDS - t0)) s): $out/$name.log"
    failed=1
  fi
  "$repo/tools/dp-lab" down >/dev/null 2>&1 || true
}
for node in b a; do
  var=DP_LAB_DUALPATHD_${node^^}
  run "failover-$node-earlier" "$var" "$build/tests/dp_lab_failover_tests" --gtest_filter="$failover"
  run "separate-$node-earlier" "$var" "$build/tests/dp_lab_separate_tests" --gtest_filter="$separate"
done
run soak-b-earlier DP_LAB_DUALPATHD_B "$build/tests/dp_lab_soak_tests"
exit "$failed"

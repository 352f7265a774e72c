#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Debian packages as a user meets them: built from this build (cpack),
# checked with lintian, installed on this machine with apt, and then what an
# operator runs first: dualpathd --version, dpctl policy check of the shipped
# example, the man pages, systemd-analyze verify of the units and their
# exposure (systemd-analyze security, at most 3.0). Removed (purged) at the
# end, whatever happened. Refuses to touch a dualpath someone else installed.
#
#   tests/package/check.sh BUILD_DIR
set -uo pipefail
build=$(cd "${1:?usage: check.sh BUILD_DIR}" && pwd)
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }

if dpkg-query -W -f='${Status}' dualpath 2>/dev/null | grep -q 'install ok installed'; then
  echo "dualpath is already installed on this machine: not replacing it (skipped)"
  exit 0
fi

echo "==> building the packages (cpack, prefix /usr)"
rm -f "$build"/dualpath*.deb
cmake -DCMAKE_INSTALL_PREFIX=/usr "$build" >/dev/null || exit 1
(cd "$build" && cpack -G DEB >/dev/null) || { echo "cpack failed"; exit 1; }
debs=("$build"/dualpath_*.deb "$build"/dualpath-tools_*.deb)
for d in "${debs[@]}"; do
  [[ -f $d ]] || { bad "no package $d"; exit 1; }
  echo "--- $(basename "$d"): $(dpkg-deb -f "$d" Depends)"
  dpkg-deb -c "$d" | awk '{print "    " $6}' | grep -v '/$'
done

echo "==> lintian"
if command -v lintian >/dev/null; then
  lint=$(lintian --tag-display-limit 0 --display-info "${debs[@]}" 2>&1 | grep -v "running with root privileges")
  echo "$lint" | sed 's/^/    /'
  errors=$(echo "$lint" | grep -c '^E:' || true)
  [[ $errors == 0 ]] && ok "lintian: no errors ($(echo "$lint" | grep -c '^W:' || true) warnings, explained in tools/packaging/README.md)" \
    || bad "lintian: $errors errors"
else
  bad "lintian is not installed"
fi

cleanup() { dpkg -P dualpath-tools dualpath >/dev/null 2>&1 || true; }
trap cleanup EXIT
echo "==> installing"
if ! apt-get install -y -qq --no-install-recommends "${debs[@]}" >/dev/null 2>&1; then
  bad "apt-get install of the packages"
  exit 1
fi
ok "installed: $(dpkg-query -W -f='${Package} ${Version}, ' dualpath dualpath-tools)"

v=$(/usr/sbin/dualpathd --version 2>&1)
[[ $v == *"$(dpkg-query -W -f='${Version}' dualpath)"* ]] && ok "dualpathd --version: $v" || bad "dualpathd --version: $v"
out=$(/usr/bin/dpctl policy check /etc/dualpath/policy.toml.example 2>/dev/null)
[[ $? == 0 && $out == *valid* ]] && ok "dpctl policy check of the shipped example: $out" || bad "policy check: $out"
for page in dualpathd.8 dpctl.8 dualpath-policy.5 dualpath-cluster.5 dp-load.1; do
  f=$(man -w "${page%.*}" 2>/dev/null | head -1)
  [[ $f == /usr/share/man/* ]] && ok "man ${page%.*}: $f" || bad "man page $page not found"
done
[[ -f /usr/share/bash-completion/completions/dpctl ]] && ok "bash completion" || bad "no completion"
grep -q dualpath /etc/iproute2/rt_protos.d/dualpath.conf && ok "rt_protos.d entry" || bad "no rt_protos entry"
/usr/bin/dp-load --help >/dev/null 2>&1 && ok "dp-load runs" || bad "dp-load --help"
for u in dualpathd.service dualpath-remove.service; do
  out=$(systemd-analyze verify "/lib/systemd/system/$u" 2>&1)
  [[ $? == 0 ]] && ok "systemd-analyze verify $u" || bad "systemd-analyze verify $u: $out"
done
score=$(systemd-analyze security --offline=true /lib/systemd/system/dualpathd.service 2>&1 | sed -n 's/.*Overall exposure level for dualpathd.service: \([0-9.]*\).*/\1/p')
if systemd-analyze security --offline=true --threshold=30 /lib/systemd/system/dualpathd.service >/dev/null 2>&1; then
  ok "systemd-analyze security: exposure $score (at most 3.0)"
else
  bad "systemd-analyze security: exposure $score, above 3.0"
fi
exit $((fails > 0))

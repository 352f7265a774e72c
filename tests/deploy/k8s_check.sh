#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/kubernetes and deploy/container, offline:
#   - the validator refuses a mistake of each kind (--self-test), then every
#     manifest is valid against the Kubernetes API schema with no unknown
#     field, and the DaemonSet is what it must be (tests/deploy/k8s/validate.mjs)
#   - every cluster description the kustomizations ship passes dpctl policy check
#   - the image recipe is linted (tests/deploy/pod_test.sh builds and runs it)
# npm installs the validator's packages (package-lock.json) into BUILD_DIR once.
#
#   tests/deploy/k8s_check.sh BUILD_DIR
set -uo pipefail
build=$(cd "${1:?usage: k8s_check.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$build/k8s-validate
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
command -v npm >/dev/null || { echo "npm is not installed (tools/quickstart installs it)"; exit 1; }

mkdir -p "$work"
cp "$src"/tests/deploy/k8s/{package.json,package-lock.json,validate.mjs} "$work/"
if ! cmp -s "$work/package-lock.json" "$work/node_modules/.package-lock.json.installed" 2>/dev/null; then
  (cd "$work" && npm ci --no-audit --no-fund --loglevel=error) || { echo "npm ci failed"; exit 1; }
  cp "$work/package-lock.json" "$work/node_modules/.package-lock.json.installed"
fi
node "$work/validate.mjs" --self-test "$work" || fails=$((fails + 1))
node "$work/validate.mjs" "$src/deploy/kubernetes" "$work" || fails=$((fails + 1))

dpctl=$build/tools/dpctl/dpctl
for c in $(find "$src/deploy/kubernetes" -name cluster.toml | sort); do
  if out=$("$dpctl" policy check "$c" 2>&1); then ok "${c#$src/}: $out"; else bad "$out"; fi
done

# the image recipe: the base is the Debian release the package is built
# for (a build argument, so that a local base can stand in), it installs the
# package cpack makes from a bind mount (no layer keeps the .deb), and it
# runs what the DaemonSet runs (dualpathd, dpctl, sh, mount). The image is
# built and run by tests/deploy/pod_test.sh (tools/quickstart test).
cf=$src/deploy/container/Containerfile
grep -q '^ARG BASE=docker.io/library/debian:bookworm' "$cf" && grep -q '^FROM \${BASE}$' "$cf" &&
  ok "Containerfile: FROM \${BASE}, Debian 12 (bookworm) by default, as the package" ||
  bad "Containerfile: ARG BASE=docker.io/library/debian:bookworm... then FROM \${BASE}"
grep -q 'RUN --mount=type=bind' "$cf" && grep -q 'apt-get install .*/dualpath_\*_amd64.deb' "$cf" &&
  ! grep -qE '^(COPY|ADD) .*\.deb' "$cf" &&
  ok "Containerfile: installs the dualpath package from a bind mount" ||
  bad "Containerfile: the .deb must be installed from RUN --mount=type=bind, never COPY'd"
grep -q 'rm -rf /var/lib/apt/lists/\*' "$cf" && ok "Containerfile: leaves no apt lists" || bad "Containerfile: apt lists left in the image"
grep -q 'dualpathd --version && dpctl --version' "$cf" && ok "Containerfile: checks the binaries run" || bad "Containerfile: no check of dualpathd and dpctl"
bad_keys=$(grep -vE '^(#|$|FROM |COPY |RUN |LABEL |CMD |ENV |ARG |USER |WORKDIR | )' "$cf" || true)
[[ -z $bad_keys ]] && ok "Containerfile: known instructions only" || bad "Containerfile: unknown lines: $bad_keys"
exit $((fails > 0))

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# deploy/kubernetes and deploy/container, offline:
#   - the validator refuses a mistake of each kind (--self-test), then every
#     manifest is valid against the Kubernetes API schema with no unknown
#     field, and the DaemonSet is what it must be (tests/deploy/k8s/validate.mjs)
#   - every cluster description the kustomizations ship passes dpctl policy check
#   - the image recipe is linted; it is built only where a container engine
#     runs and has the Debian base image (this machine has neither)
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
# for, it installs the package cpack makes, and it runs what the DaemonSet
# runs (dualpathd, dpctl, sh)
cf=$src/deploy/container/Containerfile
grep -q '^FROM docker.io/library/debian:bookworm' "$cf" && ok "Containerfile: FROM Debian 12 (bookworm), as the package" || bad "Containerfile: FROM must be Debian bookworm"
grep -q 'COPY dualpath_\*_amd64.deb' "$cf" && ok "Containerfile: installs the dualpath package" || bad "Containerfile: COPY dualpath_*_amd64.deb"
grep -q 'dualpathd --version && dpctl --version' "$cf" && ok "Containerfile: checks the binaries run" || bad "Containerfile: no check of dualpathd and dpctl"
bad_keys=$(grep -vE '^(#|$|FROM |COPY |RUN |LABEL |CMD |ENV |ARG |USER |WORKDIR | )' "$cf" || true)
[[ -z $bad_keys ]] && ok "Containerfile: known instructions only" || bad "Containerfile: unknown lines: $bad_keys"
if docker info >/dev/null 2>&1 && docker image inspect docker.io/library/debian:bookworm-slim >/dev/null 2>&1 &&
  compgen -G "$build/dualpath_*_amd64.deb" >/dev/null; then
  docker build -q -f "$cf" -t dualpath:check "$build" >/dev/null && ok "image built" || bad "image build failed"
else
  echo "note: the image is not built here: no running container engine with debian:bookworm-slim and a built .deb"
fi
exit $((fails > 0))

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CI check of the A/B benchmark: `dp-lab bench --quick` runs every mode of
# each topology for a few seconds; it exits non-zero unless every mode ran,
# wrote complete JSON and lost no data. This asserts nothing about the
# figures (machines are noisy).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lab="$here/../../tools/dp-lab"
out=${1:?usage: bench_quick.sh OUT_DIR}
[[ $(id -u) == 0 ]] || { echo "skipped: the lab needs root"; exit 0; }
if ip netns list | grep -qw dpl-a; then
  echo "a lab is already up; run 'tools/dp-lab down' first" >&2
  exit 1
fi
trap '"$lab" down >/dev/null 2>&1 || true' EXIT
"$lab" up --no-daemon >/dev/null
rm -rf "$out"
"$lab" bench --quick --out "$out"
# dp-lab bench exits non-zero unless every run of every mode is complete and
# lost no data; the files it writes are there
test -s "$out/bench.json"
test -s "$out/utilisation-default.svg"
# and each round's steps, one JSON line each, with every combine's arrival
steps=$(ls "$out"/dualpath-*-r0.steps.jsonl | head -1)
python3 -c 'import json,sys
lines=[json.loads(l) for l in open(sys.argv[1])]
assert lines and all(len(l["combine_ms"]) == 4 and l["ms"] >= max(l["combine_ms"]) for l in lines), sys.argv[1]' "$steps"
echo "bench --quick: every mode of the shared topology ran, complete JSON, no data lost"
# the separate topology (the lab is brought up anew in it)
"$lab" bench --quick --topology separate --out "$out/separate"
test -s "$out/separate/bench.json"
echo "bench --quick: every mode of the separate topology ran, complete JSON, no data lost"

#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dp-load's --sync-streams: a count outside 1 to 64, or one given with the
# periodic transfers' options, is refused before anything is sent (exit 2,
# saying why); and N streams are N connections on param-sync's port that
# each write for the whole run: every one of them is open in the middle of
# the run, every one delivers, the receiver finds every message intact, and
# the server receives what the client wrote, but for the message each
# stream ended in. Runs in a network
# namespace of its own (unshare -n: loopback only, gone when it ends).
set -uo pipefail
load=$1
fails=0
refused() { # refused WHY ARGS...: exit 2 and WHY in the message
  local why=$1 out rc
  shift
  out=$("$load" client --connect 127.0.0.1 "$@" 2>&1)
  rc=$?
  if [[ $rc == 2 && $out == *"$why"* ]]; then
    echo "ok   refused: $*"
  else
    echo "FAIL $*: rc $rc (want 2 and \"$why\"), output: $out"
    fails=$((fails + 1))
  fi
}
refused "is not 0 to 64" --sync-streams 65
refused "is not 0 to 64" --sync-streams -1
refused "--sync-streams needs param-sync" --workload rpc --sync-streams 4
refused "--sync-every is for periodic transfers" --sync-streams 4 --sync-every 1s
refused "--sync-on is for periodic transfers" --sync-streams 4 --sync-on 2s --sync-off 3s
refused "unknown workload \"bulk\"" --workload rpc,bulk

if ! unshare -n true 2>/dev/null; then
  echo "skip the rest: it needs a network namespace of its own (root)"
  exit $((fails > 0 ? 1 : 77))
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# shellcheck disable=SC2016  # expanded by the inner shell
out=$(unshare -n bash -c '
  set -u
  load=$1 dir=$2
  ip link set lo up
  "$load" server --bind 127.0.0.1 --once --json "$dir/server.json" >/dev/null 2>"$dir/server.log" &
  srv=$!
  trap "kill $srv 2>/dev/null; wait 2>/dev/null" EXIT
  sleep 0.3
  "$load" client --connect 127.0.0.1 --workload sync --sync-streams 4 --sync-size 256KiB \
    --duration 2s --json "$dir/client.json" -q >/dev/null 2>"$dir/client.log" &
  cli=$!
  sleep 1
  echo "open $(ss -tnH state established "( dport = :52000 )" | wc -l)"
  wait $cli
  echo "client rc $?"
  wait $srv
  echo "server rc $?"
' _ "$load" "$dir" 2>&1)
open=$(sed -n 's/^open //p' <<<"$out")
if [[ $out == *"client rc 0"* && $out == *"server rc 0"* && $open == 4 ]]; then
  echo "ok   4 streams open in the middle of the run, client and server exit 0"
else
  echo "FAIL the run (want 4 open streams, both exit 0): $out"
  cat "$dir/client.log" "$dir/server.log"
  fails=$((fails + 1))
fi
check=$(python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
s = json.load(open(sys.argv[2]))["counters"]
st = c["stream"]
bad = []
if st.get("sync_streams") != 4: bad.append("sync_streams %s" % st.get("sync_streams"))
if not st.get("sync_acked_exact"): bad.append("SIOCOUTQ refused")
if not st["sync_stream_bps"]["min"] > 0: bad.append("a stream delivered nothing")
if c["errors"] or s["checksum_errors"] or s["connection_errors"]:
    bad.append("errors: client %d, server %d checksum %d connection"
               % (c["errors"], s["checksum_errors"], s["connection_errors"]))
# the server gets every byte written (what was unacknowledged at the end
# too) in whole messages, payload counted: all but the partial message each
# stream ended in; the client counts as delivered at most what it wrote
acked, written = st["sync_acked_bytes"], st["sync_written_bytes"]
wire = s["bytes_received"] + 28 * s["messages"]
if not (0 < acked <= written and written - 4 * (256 * 1024 + 28) <= wire <= written):
    bad.append("client wrote %d, counted %d delivered; server received %d"
               % (written, acked, wire))
if not st["sync_goodput_bps"] > 0: bad.append("no goodput")
print("; ".join(bad) if bad else "ok")
' "$dir/client.json" "$dir/server.json" 2>&1)
if [[ $check == ok ]]; then
  echo "ok   every stream delivered, intact, and the server received what the client wrote"
else
  echo "FAIL $check"
  fails=$((fails + 1))
fi
exit $((fails > 0))

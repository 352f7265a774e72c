#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# dpctl's command line without a daemon: abbreviations, unknown words named
# with a suggestion, options anywhere, stdin as '-', and the exit codes of
# dpctl(8): 2 usage, 3 unreachable (not running, no permission).
set -uo pipefail
dpctl=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
fails=0
check() {  # check NAME WANT_RC WANT_TEXT CMD...
  local name=$1 want_rc=$2 want=$3
  shift 3
  local out rc
  out=$("$@" 2>&1 </dev/null)
  rc=$?
  if [[ $rc != "$want_rc" || $out != *"$want"* ]]; then
    echo "FAIL $name: rc $rc (want $want_rc), output: $out"
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
none=/nonexistent/dualpathd.sock
check "typo named with a suggestion" 2 'no command "statsu" (did you mean "status"?)' "$dpctl" statsu
check "typo of a subcommand" 2 'no command "class lst" (did you mean "class list"?)' "$dpctl" class lst
check "typo under -j is JSON" 2 '{"error":"no command \"pth\"' "$dpctl" -j pth list
check "a prefix of one command: pa l is path list" 3 "cannot reach dualpathd at $none" "$dpctl" -s $none pa l
check "a prefix of several is refused with them" 2 '"e" is ambiguous: env, events' "$dpctl" e
check "help at any level is that level's help" 0 "one path in detail" "$dpctl" path help
check "an object alone shows its commands" 0 "one path in detail" "$dpctl" path
check "budget --class the policy lacks is refused" 1 "has no such class; its classes are" \
  "$dpctl" budget --policy "$src/policies/lab-a.toml" --class nosuch --rate 1Gbit
bad=$(mktemp)
printf '[node]\nname = "x"\n' >"$bad"
check "policy check -j errors carry error, as every -j error" 1 '"error":"'"$bad"':1:1: error' \
  "$dpctl" -j policy check "$bad"
rm -f "$bad"
check "po ch is policy check" 0 "valid (node" "$dpctl" po ch "$src/policies/lab-a.toml"
check "options after the command" 3 '{"error":"cannot reach dualpathd' "$dpctl" status -j -s $none
check "not running: exit 3" 3 "(is it running?)" "$dpctl" -s $none status
check "a usage error: exit 2" 2 "" "$dpctl" flow list --top 0
out=$("$dpctl" policy check - <"$src/policies/lab-a.toml" 2>/dev/null)
if [[ $? == 0 && $out == "<stdin>: valid"* ]]; then echo "ok   policy check - reads stdin"; else
  echo "FAIL policy check -: $out"; fails=$((fails + 1)); fi
out=$(printf '[node]\nname = "x"\n' | "$dpctl" policy check - 2>&1)
if [[ $? == 1 && $out == "<stdin>:"*"error"* ]]; then echo "ok   errors of stdin name <stdin>"; else
  echo "FAIL policy check - with errors: $out"; fails=$((fails + 1)); fi

# budget: the reference article's example, offline
check "budget: 32 x 18 MB/s x 1.2 = 5.53 Gbit/s" 0 "5.53 Gbit/s" \
  "$dpctl" -s $none budget --policy "$src/policies/example-node.toml" --class param-sync \
  --concurrency 32 --rate 18MB/s --amplification 1.2
check "budget -j: the exact figure" 0 '"total_bps":5529600000' \
  "$dpctl" -j -s $none budget --concurrency 32 --rate 18MB/s --amplification 1.2
check "budget: a bad rate is refused" 1 'unknown unit' "$dpctl" -s $none budget --rate 18XB/s

# validate, probe and diagnose
check "probe needs a peer: exit 2" 2 "PEER is required" "$dpctl" probe
check "probe --count is bounded: exit 2" 2 "--count" "$dpctl" probe 10.0.0.1 --count 0
check "validate without a daemon: exit 3" 3 "cannot reach dualpathd" "$dpctl" -s $none validate
check "diagnose without a daemon: exit 3" 3 "cannot reach dualpathd" "$dpctl" -s $none diagnose

# completion (dpctl __complete, which tools/completion/dpctl calls) and the
# man page's synopsis against the command tree: every command, subcommand and
# long option that dpctl --help names is offered at its level, and has a
# synopsis line in dpctl(8) (*OBJECT COMMAND* ...) naming each option
man="$src/docs/man/dpctl.8.scd"
subcommands() { "$dpctl" "$@" --help 2>/dev/null | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && NF { print $1 }'; }
offered() { "$dpctl" __complete "$@" 2>/dev/null; }
missing="" unsynopsised=""
for c in $(subcommands); do
  offered "" | grep -qx -- "$c" || missing+=" $c"
  subs=$(subcommands "$c")
  for sub in ${subs:-""}; do
    [[ -z $sub ]] || offered "$c" "" | grep -qx -- "$sub" || missing+=" $c $sub"
    synopsis=$(grep -E "^\*$c${sub:+ $sub}[* ]" "$man")
    [[ -n $synopsis ]] || unsynopsised+=" ($c${sub:+ $sub}: no synopsis line)"
    # shellcheck disable=SC2086
    for o in $("$dpctl" $c $sub --help 2>/dev/null | grep -o -- ' --[a-z][a-z-]*' | sort -u); do
      [[ $o == --help ]] && continue
      # shellcheck disable=SC2086
      offered $c $sub -- | grep -qx -- "$o" || missing+=" $c $sub $o"
      [[ $synopsis == *"$o"* ]] || unsynopsised+=" ($c${sub:+ $sub} $o)"
    done
  done
done
check "completion offers the whole command tree" 0 "" test -z "$missing"
[[ -z $missing ]] || echo "  not offered:$missing"
check "dpctl(8) has a synopsis of every command and option" 0 "" test -z "$unsynopsised"
[[ -z $unsynopsised ]] || echo "  not in dpctl(8):$unsynopsised"
check "completion asks for files where a file is named" 0 "@file" "$dpctl" __complete policy check ""
check "completion of a node reads the description on the line" 0 "decode-002" \
  "$dpctl" __complete policy render "$src/policies/example-cluster.toml" --node ""

# no permission: a socket only root may use, tried as nobody
if [[ $(id -u) == 0 ]] && command -v python3 >/dev/null && id nobody >/dev/null 2>&1; then
  dir=$(mktemp -d)
  trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
  chmod 755 "$dir"
  python3 -c 'import os, socket, sys, time
s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o600); s.listen(1)
time.sleep(30)' "$dir/sock" &
  pid=$!
  for _ in $(seq 50); do [[ -S $dir/sock ]] && break; sleep 0.1; done
  check "no permission: exit 3, said so" 3 "no permission to use dualpathd's socket" \
    setpriv --reuid=nobody --regid=nogroup --clear-groups "$dpctl" -s "$dir/sock" status
fi
# cluster descriptions (dualpath-cluster(5)): rendered, checked, compared
cl=$src/policies/example-cluster.toml
out=$(mktemp -d)
check "render --node prints the node's policy" 0 'name = '"'"'decode-002'"'"'' "$dpctl" policy render "$cl" --node decode-002
check "render of a node the description lacks: the nearest name" 1 'did you mean "decode-002"?' \
  "$dpctl" policy render "$cl" --node decode-02
check "render needs --node or --all" 2 "give --node NAME or --all DIR" "$dpctl" policy render "$cl"
check "render of a policy is refused" 1 "is not a cluster description" \
  "$dpctl" policy render "$src/policies/lab-a.toml" --node dpl-a
check "render --all writes a file per node" 0 "7 node policies written, 0 unchanged" \
  "$dpctl" policy render "$cl" --all "$out/nodes"
check "render --all again writes nothing" 0 "0 node policies written, 7 unchanged" \
  "$dpctl" policy render "$cl" --all "$out/nodes"
check "a rendered policy passes policy check" 0 "valid (node prefill-001" \
  "$dpctl" policy check "$out/nodes/prefill-001.toml"
check "policy check of a description checks every node" 0 '"cluster":"moe-west"' \
  "$dpctl" -j policy check "$cl"
# render --node checks every node, as --all and policy check do
sed 's/^load_threshold = 0.50 /load_treshold = 0.50 /' "$cl" >"$out/typo.toml"
check "render --node refuses a mistake in another group, with its line" 1 \
  "$out/typo.toml:103:17: error: nodes prefill-001, prefill-002, prefill-003: unknown key" \
  "$dpctl" policy render "$out/typo.toml" --node decode-001
sed 's/^name = "decode-002"/name = "decode-002.moe.internal"/' "$cl" >"$out/dotted.toml"
check "render --node of a node whose entry is invalid: its error, not 'not in the description'" 1 \
  'node name "decode-002.moe.internal" must be 1-31 characters' \
  "$dpctl" policy render "$out/dotted.toml" --node decode-002.moe.internal
sed 's/^name = "decode-002"/name = "decode-002"\nhostname = "ip-10-20-0-22.ec2.internal"/' "$cl" >"$out/hostname.toml"
check "render --node by hostname" 0 "# dualpath policy of node decode-002 (hostname ip-10-20-0-22.ec2.internal" \
  "$dpctl" policy render "$out/hostname.toml" --node ip-10-20-0-22.ec2.internal
sed 's/^load_threshold = 0.50 /load_threshold = 0.45 /' "$cl" >"$out/new.toml"
check "policy diff of two descriptions names the nodes that change" 1 \
  "3 of 7 nodes change" "$dpctl" policy diff "$cl" "$out/new.toml"
check "policy diff of a description and a node's policy" 1 "scheduler.load_threshold: 0.5 -> 0.45" \
  "$dpctl" policy diff "$out/nodes/prefill-002.toml" "$out/new.toml"
check "policy diff of the same description: no change" 0 "changes no node's policy" \
  "$dpctl" policy diff "$cl" "$cl"
rm -rf "$out"

exit $((fails > 0))

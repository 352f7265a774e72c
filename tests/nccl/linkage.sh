#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The plugin lives in other programs' processes: it may need only libc,
# libstdc++, libm and the loader, and export only ncclNetPlugin_v6..v12.
set -euo pipefail
lib=${1:?usage: linkage.sh libnccl-net-dualpath.so}
fail=0
while read -r needed; do
  case "$needed" in
    libc.so.* | libstdc++.so.* | libm.so.* | ld-linux*.so.*) ;;
    *) echo "FAIL: $lib needs $needed"; fail=1 ;;
  esac
done < <(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
expected=$(printf 'ncclNetPlugin_v%s\n' 6 7 8 9 10 11 12 | sort)
if [[ $exported != "$expected" ]]; then
  echo "FAIL: exported symbols differ from the plugin tables:"
  diff <(echo "$expected") <(echo "$exported") || true
  fail=1
fi
# every symbol resolves at load, as NCCL's dlopen(RTLD_NOW) needs
if ldd -r "$lib" 2>&1 | grep -q 'undefined symbol'; then
  echo "FAIL: undefined symbols:"; ldd -r "$lib" 2>&1 | grep 'undefined symbol'; fail=1
fi
[[ $fail == 0 ]] && echo "ok: $(readelf -d "$lib" | grep -c NEEDED) libraries needed, 7 tables exported"
exit $fail

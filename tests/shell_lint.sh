#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every shell script the project ships or runs (found by its #! line, so a new
# one is checked without being listed here) passes shellcheck at warning
# severity: quoting, unset variables, masked exit codes.
# Usage: tests/shell_lint.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: shell_lint.sh SOURCE_DIR}
cd "$src"
command -v shellcheck >/dev/null || { echo "shellcheck is not installed (tools/quickstart deps)"; exit 1; }
mapfile -t scripts < <(find .ci tools tests deploy systemd -type f -not -path '*/node_modules/*' \
  -exec grep -lEm1 '^#!.*\b(ba)?sh\b' {} + 2>/dev/null | sort)
((${#scripts[@]} > 0)) || { echo "no shell scripts found under $src"; exit 1; }
echo "shellcheck -S warning on ${#scripts[@]} scripts"
shellcheck -S warning "${scripts[@]}"

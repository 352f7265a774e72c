// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the policy parser and the semantic diff, on any bytes. A policy
// file is edited by hand and comes from git: every input must end in a policy
// or in diagnostics with a position, never in a crash, a hang or unbounded
// output.
#include <cstdint>
#include <string>

#include "dualpath/core/policy.h"
#include "dualpath/core/policy_diff.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto r = dp::parse_policy(text, "fuzz.toml");
  if (r.ok()) {
    // a valid policy encodes, classifies and diffs against itself as no change
    (void)r.policy->classify(dp::Proto::Tcp, 1, 2, 0);
    auto d = dp::diff_policies(text, "a", text, "b");
    if (d && !d->empty()) __builtin_trap();
  } else if (r.errors.empty() || r.errors.size() > 10000) {
    __builtin_trap();
  }
  return 0;
}

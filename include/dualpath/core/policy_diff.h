// SPDX-License-Identifier: Apache-2.0
// What changes between two policy files, key by key: the running policy and
// a candidate (`dpctl policy diff FILE`, and `dpctl policy apply` before it
// installs one). Pure: it compares the TOML documents, not their text, so
// comments and layout are no change at all.
// [[path]] and [[class]] entries are matched by their name, so reordering
// them is no change either and a renamed class is one removed and one added.
// A key whose new value means the same (0x110 and 272, "500us" and "0.5ms",
// a default written out) is no change: each key's change is made alone to
// the old policy and dropped when the parsed policy stays the same.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/result.h"

namespace dp {

struct PolicyChange {
  enum class Kind { Added, Removed, Changed };
  Kind kind = Kind::Changed;
  std::string where;  // "class \"param-sync\".prefer", "scheduler.load_threshold", "path \"rail1\""
  std::optional<std::string> before, after;  // TOML renderings; absent for the side it lacks
  int line = 0;                              // in the new file (the old one for a removal)
  std::string str() const;  // "~ class \"param-sync\".prefer: \"rail1\" -> \"rail0\""
};

// Both texts must parse as TOML (validate them as policies first); a parse
// error is returned with its position.
Result<std::vector<PolicyChange>> diff_policies(const std::string& before_text,
                                                const std::string& before_name,
                                                const std::string& after_text,
                                                const std::string& after_name);

const char* to_string(PolicyChange::Kind k);

}  // namespace dp

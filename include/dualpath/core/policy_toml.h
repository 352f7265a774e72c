// SPDX-License-Identifier: Apache-2.0
// The policy checks over a TOML document already parsed (toml++), for code
// that builds the document itself: dpctl policy render checks each node's
// policy as it is assembled from a cluster description, so an error names
// the description's file and line (a node's source region), not the
// rendered text's.
#pragma once

#include <toml++/toml.h>

#include <string>

#include "dualpath/core/policy.h"

namespace dp {

// As parse_policy(text, name): `text` becomes Policy::text and its hash.
// A node without a source region (one the caller made) is reported at line 0
// of `name`.
PolicyLoad check_policy(const toml::table& root, const std::string& text, const std::string& name);

// One line of TOML for a value (tables inline, floats shortest), as policy
// diffs show it and dpctl policy render writes it.
std::string render_toml_value(const toml::node& n);

}  // namespace dp

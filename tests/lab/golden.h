// SPDX-License-Identifier: Apache-2.0
// Golden control replies: the shape of every control reply of a running lab
// daemon, kept in tests/golden/ and compared by the lab tests, so that a
// change inside the daemon cannot quietly change what dpctl and scripts read.
//
// A reply's shape keeps every key, the type of every value, and the exact
// value of the strings that name things (paths, classes, error codes and
// messages); numbers and other strings become "number" and "string". A null
// (not measured yet) on either side matches anything: it depends on timing.
#pragma once

#include <string>
#include <vector>

#include "lab_util.h"

namespace lab {

json reply_shape(const json& reply);
// Differences between a golden shape and an actual one, each "path: what".
std::vector<std::string> shape_diff(const json& golden, const json& actual,
                                    const std::string& where = "");

}  // namespace lab

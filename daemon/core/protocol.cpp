// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/protocol.h"

namespace dp {

json reply_ok(json data) { return json{{"ok", true}, {"data", std::move(data)}}; }

json reply_error(const std::string& code, const std::string& message) {
  return json{{"ok", false}, {"error", {{"code", code}, {"message", message}}}};
}

}  // namespace dp

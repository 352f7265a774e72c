// SPDX-License-Identifier: Apache-2.0
// libFuzzer: control requests as dualpathd's control server takes them, one
// per line: the nesting check, JSON parsing, and the command table with the
// daemon's command names (read-only and mutating), privileged and not. Every
// line must get exactly one reply, ok or an error with a known code.
#include <cstdint>
#include <set>
#include <string>

#include "control_server.h"

namespace {

const std::set<std::string> kCodes = {"bad_request",       "unknown_command", "not_found",
                                      "permission_denied", "invalid",         "failed"};

dp::CommandTable table() {
  dp::CommandTable t;
  auto echo = [](const dp::json& args) { return dp::reply_ok(args); };
  for (const char* q :
       {"status", "path.list", "path.show", "class.list", "flow.list", "policy.show", "events"})
    t.add({q, false, "", {}, echo});
  for (const char* m : {"path.drain", "path.undrain", "class.set", "class.unpin", "policy.reload"})
    t.add({m, true, "", {}, echo});
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const dp::CommandTable t = table();
  std::string line(reinterpret_cast<const char*>(data), size);
  if (line.size() > dp::kMaxRequestBytes) return 0;  // refused before this point
  dp::json reply;
  if (dp::json_depth(line) > dp::ControlServer::kMaxDepth) {
    reply = dp::reply_error(dp::ErrorCode::BadRequest, "too deep");
  } else {
    dp::json req = dp::json::parse(line, nullptr, false);
    reply = req.is_discarded() ? dp::reply_error(dp::ErrorCode::BadRequest, "not JSON")
                               : t.dispatch(req, size % 2 == 0);
  }
  if (!reply.is_object() || !reply.contains("ok")) __builtin_trap();
  if (!reply["ok"].get<bool>() && !kCodes.count(reply["error"]["code"].get<std::string>()))
    __builtin_trap();
  (void)reply.dump();
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/protocol.h"

namespace dp {

std::string_view to_string(ErrorCode c) {
  switch (c) {
    case ErrorCode::BadRequest:
      return "bad_request";
    case ErrorCode::UnknownCommand:
      return "unknown_command";
    case ErrorCode::NotFound:
      return "not_found";
    case ErrorCode::PermissionDenied:
      return "permission_denied";
    case ErrorCode::Invalid:
      return "invalid";
    case ErrorCode::Failed:
      return "failed";
    case ErrorCode::Unavailable:
      return "unavailable";
    case ErrorCode::NoRdma:
      return "no_rdma";
  }
  return "failed";
}

json reply_ok(json data) { return json{{"ok", true}, {"data", std::move(data)}}; }

json reply_error(ErrorCode code, const std::string& message) {
  return json{{"ok", false}, {"error", {{"code", to_string(code)}, {"message", message}}}};
}

}  // namespace dp

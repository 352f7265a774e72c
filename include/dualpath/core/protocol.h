// SPDX-License-Identifier: Apache-2.0
// The control protocol between dpctl and dualpathd: one JSON object per line
// over a unix stream socket (client/control_socket.h carries it).
//
//   request:  {"cmd": "class.set", "args": {"class": "logs", "path": "rail1"}}
//   reply:    {"ok": true, "data": {...}}
//         or  {"ok": false, "error": {"code": "not_found", "message": "..."}}
//
// Error codes: bad_request, unknown_command, not_found, permission_denied,
// invalid, failed. Read-only commands are open to anyone who can connect
// (the socket is 0660); mutating commands need uid 0 (SO_PEERCRED).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace dp {

using json = nlohmann::json;

inline constexpr const char* kDefaultSocket = "/run/dualpath/dualpathd.sock";
inline constexpr size_t kMaxRequestBytes = 64 * 1024;

json reply_ok(json data = json::object());
json reply_error(const std::string& code, const std::string& message);

}  // namespace dp

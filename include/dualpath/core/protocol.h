// SPDX-License-Identifier: Apache-2.0
// The control protocol between dpctl and dualpathd: one JSON object per line
// over a unix stream socket (client/control_socket.h carries it).
//
//   request:  {"cmd": "class.set", "args": {"class": "logs", "path": "rail1"}}
//   reply:    {"ok": true, "data": {...}}
//         or  {"ok": false, "error": {"code": "not_found", "message": "..."}}
//
// Read-only commands are open to anyone who can connect (the socket is
// 0660); mutating commands need uid 0 (SO_PEERCRED). Each command declares
// its arguments (Arg), and the server refuses a request whose arguments do
// not fit before the command runs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace dp {

using json = nlohmann::json;

inline constexpr const char* kDefaultSocket = "/run/dualpath/dualpathd.sock";
inline constexpr size_t kMaxRequestBytes = 64 * 1024;

// Every error code a reply can carry ("code" in the reply, as to_string
// spells it); dpctl(8) lists them.
enum class ErrorCode {
  BadRequest,        // bad_request: not a request, or arguments that do not fit
  UnknownCommand,    // unknown_command
  NotFound,          // not_found: no such class or path
  PermissionDenied,  // permission_denied: a mutating command from a non-root peer
  Invalid,           // invalid: a change the policy or the state forbids
  Failed,            // failed: the kernel refused a change
  Unavailable,       // unavailable: the node lacks what the command needs (cgroup v2)
  NoRdma,            // no_rdma: the class's rails have no RDMA device
};
std::string_view to_string(ErrorCode c);

json reply_ok(json data = json::object());
json reply_error(ErrorCode code, const std::string& message);

// An argument of a command: its name in "args", its JSON type, and whether
// it must be given. A required string that is missing or not a string is
// refused as "CMD needs "A" [and "B"]"; an optional argument of the wrong
// type as ""A" must be WHAT".
enum class ArgType {
  String,
  Positive,  // an integer above 0
  Unsigned,  // an integer of 0 or more
  Bool,
};
struct Arg {
  std::string_view name;
  ArgType type = ArgType::String;
  bool required = false;
  std::string_view help;
  std::string_view must_be = {};  // what the refusal says it must be; from the type if empty
};

}  // namespace dp

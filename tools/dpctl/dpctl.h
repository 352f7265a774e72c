// SPDX-License-Identifier: Apache-2.0
// What dpctl's command files share: the global options, JSON or text output,
// errors, and requests to dualpathd.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dualpath/client/control_socket.h"

namespace dpctl {

using dp::json;

struct Globals {
  bool json_out = false;
  bool pretty = false;
  std::string socket = dp::kDefaultSocket;
};

void print_json(const Globals& g, const json& j);
// Errors: {"error": ...} on stdout under -j, a sentence on stderr otherwise. Returns 1.
int fail(const Globals& g, const std::string& message, const json& extra = nullptr);
std::string str(const json& j);
// Columns aligned under their heads.
void print_table(const std::vector<std::string>& head,
                 const std::vector<std::vector<std::string>>&
                     rows);  // a string as is, null as "-", anything else as JSON
// Exit codes (dpctl(8), EXIT STATUS).
inline constexpr int kExitRefused = 1;  // the command or the daemon reported an error
inline constexpr int kExitUsage = 2;    // a usage error
inline constexpr int kExitUnreachable =
    3;  // the daemon cannot be reached (not running, permission)

// Sends a request; prints the error reply and returns nullopt on failure
// (*rc: kExitRefused for an error reply, kExitUnreachable when there was none).
std::optional<json> request(const Globals& g, const std::string& cmd, json args, int* rc);

// policy.cpp: policy files, with or without a daemon
int cmd_policy_check(const Globals& g, const std::string& file);
int cmd_policy_reload(const Globals& g);
int cmd_policy_show(const Globals& g);
int cmd_policy_diff(const Globals& g, const std::vector<std::string>& files);
int cmd_policy_apply(const Globals& g, const std::string& file);
int cmd_policy_rollback(const Globals& g);
int cmd_policy_render(const Globals& g, const std::string& file, const std::string& node,
                      const std::string& dir);

// budget.cpp: bandwidth arithmetic of a planned load (no daemon needed)
struct BudgetArgs {
  std::string file, policy, klass, rate, kv;
  double concurrency = 1, amplification = 1;
  std::optional<double> headroom;
};
int cmd_budget(const Globals& g, const BudgetArgs& a);

// diagnose.cpp: validate, probe and diagnose (dpctl(8), "Diagnostics")
struct ValidateArgs {
  std::vector<std::string> peers;
  uint16_t port = 7862;
  double duration = 1;  // seconds per throughput test
  int streams = 4;
  double min_throughput = 0.5;  // of the path's capacity, multi-stream
};
int cmd_validate(const Globals& g, const ValidateArgs& a);
struct ProbeArgs {
  std::string peer, klass;
  uint16_t port = 7862;
  int count = 20;
};
int cmd_probe(const Globals& g, const ProbeArgs& a);
struct DiagnoseArgs {
  std::vector<std::string> peers;
  std::string klass;
  uint16_t port = 7862;
  double seconds = 2;  // how long sockets and CPUs are watched
};
int cmd_diagnose(const Globals& g, const DiagnoseArgs& a);

}  // namespace dpctl

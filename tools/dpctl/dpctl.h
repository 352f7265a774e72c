// SPDX-License-Identifier: Apache-2.0
// What dpctl's command files share: the global options, JSON or text output,
// errors, and requests to dualpathd.
//
// Each object is one file that declares its commands once, with CLI11: the
// words, options, help and what runs (add_status, add_path, ...). main.cpp
// holds only the table of objects; the help at every level, unambiguous
// prefixes and bash completion (dpctl __complete) all walk that one tree.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

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
// Shares of rails ({"rail0": 80, "rail1": 20}) as text: "rail0:80%,rail1:20%"
// in tables (sep ",", between ":"), "rail0 80%, rail1 20%" in events; rails
// at 0% left out where skip_zero. Empty when nothing is left.
std::string shares_text(const json& shares, bool skip_zero, std::string_view sep = ",",
                        std::string_view between = ":");
// One event of dpctl events (a decision, a health transition), two lines.
void print_event(const json& e);
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

// What a parsed command runs; set by the command's callback.
using Action = std::function<int()>;

// The objects: each adds its commands to `app` (main.cpp's table).
void add_status(CLI::App& app, const Globals& g, Action& action);
void add_path(CLI::App& app, const Globals& g, Action& action);
void add_class(CLI::App& app, const Globals& g, Action& action);
void add_flow(CLI::App& app, const Globals& g, Action& action);
void add_events(CLI::App& app, const Globals& g, Action& action);
void add_run(CLI::App& app, const Globals& g, Action& action);  // run and env
void add_policy(CLI::App& app, const Globals& g, Action& action);
void add_budget(CLI::App& app, const Globals& g, Action& action);
void add_diagnostics(CLI::App& app, const Globals& g, Action& action);  // validate, probe, diagnose

// Type names that tell completion what a value is (dpctl __complete): a
// class or path of the running policy, a node of the description on the
// line, a file or a directory.
inline constexpr const char* kClass = "CLASS";
inline constexpr const char* kPath = "PATH";
inline constexpr const char* kNode = "NODE";
inline constexpr const char* kFile = "FILE";
inline constexpr const char* kDir = "DIR";

}  // namespace dpctl

// SPDX-License-Identifier: Apache-2.0
// The paths (rails): list, show one, drain and undrain.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "command.h"

namespace dp {

namespace {

json drain(Node& n, const json& args, bool on) {
  const Policy& pol = n.policy();
  const std::string path = arg(args, "path");
  int i = pol.path_index(path);
  if (i < 0) return reply_error(ErrorCode::NotFound, fmt::format("no path named \"{}\"", path));
  auto idx = static_cast<size_t>(i);
  if (auto r = n.controller().drain(idx, on, SchedClock::now()); !r)
    return reply_error(ErrorCode::Invalid, r.error().what());
  spdlog::info("path {} {} by operator", path, on ? "drained" : "undrained");
  n.settle();
  return reply_ok({{"path", path}, {"health", health_json(n, idx)}});
}

const Arg kPathArg{"path", ArgType::String, true, "path name"};

}  // namespace

std::vector<Command> path_commands(Node& n) {
  return {
      {"path.list",
       false,
       "every path with rate, utilisation and counters",
       {},
       [&n](const json&) { return reply_ok(paths_json(n)); }},
      {"path.show",
       false,
       "one path in detail",
       {kPathArg},
       [&n](const json& args) {
         const std::string name = arg(args, "path");
         for (auto& p : paths_json(n))
           if (p["name"] == name) return reply_ok(p);
         return reply_error(ErrorCode::NotFound, fmt::format("no path named \"{}\"", name));
       }},
      {"path.drain",
       true,
       "move all traffic off a path for maintenance",
       {kPathArg},
       [&n](const json& args) { return drain(n, args, true); }},
      {"path.undrain",
       true,
       "give a drained path its traffic back, gradually",
       {kPathArg},
       [&n](const json& args) { return drain(n, args, false); }},
  };
}

}  // namespace dp

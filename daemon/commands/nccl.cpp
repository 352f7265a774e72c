// SPDX-License-Identifier: Apache-2.0
// What the NCCL plugins report (tools/nccl): the bytes each process sent per
// class and path, and the moves of its traffic, for dpctl class list, the
// metrics and dpctl events. Any peer that may query may report: the counts
// are its own (the pid is the kernel's, not the request's), and what it may
// log is limited per process (core/nccl_reports.h).
#include <fmt/format.h>

#include "command.h"

namespace dp {

namespace {

// At most this many counts and moves in one report, each move's text at most
// kMaxText bytes.
constexpr size_t kMaxCounts = 256, kMaxMoves = 64, kMaxText = 512;

json nccl_report(Node& n, const json& args, pid_t peer) {
  const Policy& pol = n.policy();
  const std::string process = args.value("process", std::string("?"));
  const json counts = args.value("bytes", json::array());
  const json moves = args.value("moves", json::array());
  if (!counts.is_array() || counts.size() > kMaxCounts)
    return reply_error(ErrorCode::BadRequest,
                       fmt::format("\"bytes\" must be an array of at most {} [class, path, "
                                   "bytes] entries",
                                   kMaxCounts));
  if (!moves.is_array() || moves.size() > kMaxMoves)
    return reply_error(ErrorCode::BadRequest,
                       fmt::format("\"moves\" must be an array of at most {} objects with a "
                                   "\"class\" and a \"reason\"",
                                   kMaxMoves));
  std::vector<NcclReports::Count> got;
  for (const auto& c : counts) {
    if (!c.is_array() || c.size() != 3 || !c[0].is_string() || !c[1].is_string() ||
        !c[2].is_number_unsigned())
      return reply_error(
          ErrorCode::BadRequest,
          fmt::format("a \"bytes\" entry is [class, path, bytes], not {}", c.dump()));
    NcclReports::Count k{c[0].get<std::string>(), c[1].get<std::string>(), c[2].get<uint64_t>()};
    if (pol.class_index(k.klass) < 0)
      return reply_error(ErrorCode::NotFound, fmt::format("no class named \"{}\"", k.klass));
    if (pol.path_index(k.path) < 0)
      return reply_error(ErrorCode::NotFound, fmt::format("no path named \"{}\"", k.path));
    got.push_back(std::move(k));
  }
  for (const auto& m : moves) {
    if (!m.is_object() || !m.contains("class") || !m["class"].is_string() ||
        !m.contains("reason") || !m["reason"].is_string() ||
        m["reason"].get_ref<const std::string&>().size() > kMaxText)
      return reply_error(ErrorCode::BadRequest,
                         fmt::format("a move is an object with a \"class\" and a \"reason\" of "
                                     "at most {} bytes",
                                     kMaxText));
    if (pol.class_index(m["class"].get<std::string>()) < 0)
      return reply_error(ErrorCode::NotFound,
                         fmt::format("no class named \"{}\"", m["class"].get<std::string>()));
  }
  auto now = std::chrono::steady_clock::now();
  NcclReports& r = n.nccl();
  // (a plugin whose sockets could not be marked: the datapath counts them)
  r.report(peer, process.substr(0, 64), got, now, !args.value("unmarked", false));
  int admitted = r.admit_events(peer, static_cast<int>(moves.size()), now);
  for (int i = 0; i < admitted; ++i) {
    SchedulerEvent e;
    e.t = SchedClock::now();
    e.klass = moves[static_cast<size_t>(i)]["class"];
    e.kind = "nccl";
    e.reason = fmt::format("NCCL plugin, pid {} ({}): {}", peer, process.substr(0, 64),
                           moves[static_cast<size_t>(i)]["reason"].get<std::string>());
    n.record(std::move(e));
  }
  return reply_ok({{"counted", got.size()},
                   {"moves_logged", admitted},
                   {"moves_dropped", static_cast<int>(moves.size()) - admitted}});
}

}  // namespace

std::vector<Command> nccl_commands(Node& n) {
  return {
      {"nccl.report",
       false,
       "an NCCL plugin's running totals of what it sent per class and path, and its moves",
       {{"process", ArgType::String, false, "the reporting process's name", ""},
        {"unmarked", ArgType::Bool, false,
         "the plugin's sockets carry no fwmark: its bytes are not added to its classes' load", ""}},
       nullptr,
       [&n](const json& args, pid_t peer) { return nccl_report(n, args, peer); }},
  };
}

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
// The flow table: the heaviest flows, each multipath connection with its
// subflows, and what each NCCL plugin process sent.
#include <time.h>

#include <algorithm>

#include <fmt/format.h>

#include "command.h"
#include "dualpath/core/views.h"

namespace dp {

namespace {

json flows_json(const Node& n, const json& args) {
  const Policy& pol = n.policy();
  const size_t top = args.value("top", size_t{20});
  std::optional<std::string> want_class, want_path;
  if (args.contains("class")) want_class = arg(args, "class");
  if (args.contains("path")) want_path = arg(args, "path");
  if (want_class && !pol.klass(*want_class))
    return reply_error(ErrorCode::NotFound, fmt::format("no class named \"{}\"", *want_class));
  if (want_path && !pol.path(*want_path))
    return reply_error(ErrorCode::NotFound, fmt::format("no path named \"{}\"", *want_path));
  std::array<std::string, DP_MAX_CLASSES> cname;
  std::array<std::string, DP_MAX_RAILS> rname;
  for (size_t i = 0; i < pol.classes.size(); ++i)
    cname[n.datapath().class_slot(i)] = pol.classes[i].name;
  for (size_t i = 0; i < pol.paths.size(); ++i)
    rname[n.datapath().rail_slot(i)] = pol.paths[i].name;

  size_t total = 0;
  std::vector<FlowRow> rows;
  for (auto& r : n.datapath().flows(&total)) {
    if (r.flow.cls >= DP_MAX_CLASSES || r.flow.rail >= DP_MAX_RAILS) continue;
    if (want_class && cname[r.flow.cls] != *want_class) continue;
    if (want_path && rname[r.flow.rail] != *want_path) continue;
    rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end(),
            [](const FlowRow& a, const FlowRow& b) { return a.flow.bytes > b.flow.bytes; });
  if (rows.size() > top) rows.resize(top);
  struct timespec ts {};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // bpf_ktime_get_ns() is CLOCK_MONOTONIC
  uint64_t now_ns =
      static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
  json out = render_flows(rows, total, cname, rname, now_ns);
  // burst placement: the size the plan took for each flow's next burst
  for (size_t i = 0; i < rows.size(); ++i)
    if (auto planned = n.burst_sizes().last(rows[i].key))
      out["flows"][i]["planned_burst_bytes"] = *planned;
  // multipath classes: each MPTCP connection with its subflows
  if (n.multipath().running()) {
    json conns = json::array();
    for (auto& c : n.multipath().connections_json())
      if (!want_class || c["class"] == *want_class) conns.push_back(std::move(c));
    out["mptcp"] = std::move(conns);
  }
  // NCCL plugins: their streams carry their rail's fwmark and no class in
  // the flow table, so each process says what it sent (nccl.report)
  json nccl = json::array();
  for (const auto& p : n.state().nccl.processes(std::chrono::steady_clock::now())) {
    json sent = json::array();
    for (const auto& s : p.sent)
      if ((!want_class || s.klass == *want_class) && (!want_path || s.path == *want_path))
        sent.push_back({{"class", s.klass},
                        {"path", s.path},
                        {"bytes", s.bytes},
                        {"bytes_per_s", s.bytes_per_s ? json(*s.bytes_per_s) : json(nullptr)}});
    if (sent.empty()) continue;
    nccl.push_back({{"pid", p.pid},
                    {"process", p.name},
                    {"scheduled", p.scheduled},
                    {"reported_s_ago", p.since.count()},
                    {"sent", std::move(sent)}});
  }
  if (!nccl.empty()) out["nccl"] = std::move(nccl);
  return reply_ok(out);
}

}  // namespace

std::vector<Command> flow_commands(Node& n) {
  return {
      {"flow.list",
       false,
       "the heaviest flows, with class, path, bytes, RTT, retransmits",
       {{"top", ArgType::Positive, false, "how many flows (20)"},
        {"class", ArgType::String, false, "only flows of this class"},
        {"path", ArgType::String, false, "only flows on this path"}},
       [&n](const json& args) { return flows_json(n, args); }},
  };
}

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
// The traffic classes: list, show one, pin to a path (set) and give back
// (unpin), and
// what dpctl run and dpctl env need to launch a command in a class.
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "command.h"
#include "dualpath/core/encode.h"
#include "dualpath/core/launch_env.h"
#include "dualpath/core/views.h"

namespace dp {

namespace {

// One class as dpctl class list shows it; conns: the datapath's connects().
json class_json(const Node& n, size_t i, const ConnectTable& conns) {
  const Policy& pol = n.policy();
  ClassView v;
  v.spec = &pol.classes[i];
  v.slot = static_cast<uint32_t>(n.datapath().class_slot(i));
  v.topology = pol.topology;
  v.connections_unmapped = conns[DP_CONNECT_UNMAPPED][v.slot];
  if (auto d = n.datapath().decision(i)) v.decision = *d;
  v.decided = n.decided_shares(i);
  v.carried = n.state().carried.carried(i);
  for (auto& g : n.datapath().cgroups())
    if (g.klass == i) v.cgroups.push_back({g.rule, g.dir, g.id});
  for (size_t p = 0; p < pol.paths.size(); ++p) {
    size_t rs = n.datapath().rail_slot(p);
    v.paths.push_back({pol.paths[p].name, rs, n.measurements().counters()[rs][v.slot],
                       n.measurements().tcp()[rs][v.slot], conns[rs][v.slot],
                       pol.paths[p].capacity_bps,
                       n.state().nccl.bytes(pol.classes[i].name, pol.paths[p].name)});
  }
  return render_class(v);
}

json classes_json(const Node& n) {
  json out = json::array();
  auto conns = n.datapath().connects();
  for (size_t i = 0; i < n.policy().classes.size(); ++i) out.push_back(class_json(n, i, conns));
  return out;
}

// dpctl class show: the class as class list has it, and why it is where it
// is: its newest events (decisions, pins, streams it could not move).
constexpr size_t kShownEvents = 10;

json class_show(const Node& n, const json& args) {
  const Policy& pol = n.policy();
  const std::string name = arg(args, "class");
  int k = pol.class_index(name);
  if (k < 0) return reply_error(ErrorCode::NotFound, fmt::format("no class named \"{}\"", name));
  json c = class_json(n, static_cast<size_t>(k), n.datapath().connects());
  c["events"] = n.events().newest_of(pol, name, kShownEvents);
  return reply_ok(c);
}

// An operator's pin or unpin in dpctl events, beside the scheduler's moves.
void record_pin(Node& n, const std::string& cls, Shares before, Shares after, std::string reason) {
  SchedulerEvent e;
  e.t = SchedClock::now();
  e.klass = cls;
  e.kind = "pin";
  e.before = std::move(before);
  e.after = std::move(after);
  e.reason = std::move(reason);
  n.record(std::move(e));
}

json class_set(Node& n, const json& args) {
  const Policy& pol = n.policy();
  const std::string cls = arg(args, "class"), path = arg(args, "path");
  int ci = pol.class_index(cls);
  if (ci < 0) return reply_error(ErrorCode::NotFound, fmt::format("no class named \"{}\"", cls));
  int pi = pol.path_index(path);
  if (pi < 0) return reply_error(ErrorCode::NotFound, fmt::format("no path named \"{}\"", path));
  Shares before = n.decided_shares(static_cast<size_t>(ci));
  auto r = place(n, static_cast<size_t>(ci), static_cast<size_t>(pi), true);
  if (!r) return reply_error(ErrorCode::Failed, r.error().what());
  spdlog::info("class {} pinned to path {} by operator", cls, path);
  record_pin(n, cls, std::move(before), n.decided_shares(static_cast<size_t>(ci)),
             fmt::format("{} pinned to {} by the operator (dpctl class set)", cls, path));
  return reply_ok({{"class", cls}, {"path", path}, {"pinned", true}});
}

json class_unpin(Node& n, const json& args) {
  const Policy& pol = n.policy();
  const std::string cls = arg(args, "class");
  int i = pol.class_index(cls);
  if (i < 0) return reply_error(ErrorCode::NotFound, fmt::format("no class named \"{}\"", cls));
  auto ci = static_cast<size_t>(i);
  Shares before = n.decided_shares(ci);
  if (pol.classes[ci].pinned)
    return reply_error(
        ErrorCode::Invalid,
        fmt::format("{} is pinned by the policy ({}); edit the policy to unpin it", cls, pol.file));
  if (auto r = n.datapath().clear_operator_pin(ci); !r)
    return reply_error(ErrorCode::Failed, r.error().what());
  n.controller().unpinned(ci);
  if (!pol.scheduler.adaptive) {
    // static mode has no scheduler to take it back: the policy's rail
    auto prefer = static_cast<size_t>(pol.path_index(pol.classes[ci].prefer));
    if (auto r = place(n, ci, prefer, false); !r)
      return reply_error(ErrorCode::Failed, r.error().what());
  }
  const char* next =
      pol.scheduler.adaptive ? "the scheduler decides again" : "back on its preferred rail";
  spdlog::info("class {} unpinned by operator: {}", cls, next);
  record_pin(n, cls, std::move(before), n.decided_shares(ci),
             fmt::format("{} unpinned by the operator (dpctl class unpin): {}", cls, next));
  return reply_ok({{"class", cls}, {"pinned", false}});
}

// dpctl run: the class's run slice, made now and matched at once, so that
// the first socket of the command is in the class.
json class_run(Node& n, const json& args) {
  const Policy& pol = n.policy();
  const std::string name = arg(args, "class");
  int k = pol.class_index(name);
  if (k < 0) return reply_error(ErrorCode::NotFound, fmt::format("no class named \"{}\"", name));
  if (n.datapath().cgroup_root().empty())
    return reply_error(ErrorCode::Unavailable, "no cgroup v2 hierarchy is mounted");
  auto dir = make_run_slice(n.datapath().cgroup_root(), pol.node, name);
  if (!dir) return reply_error(ErrorCode::Failed, dir.error().what());
  n.datapath().refresh_cgroups(pol);
  RunSlice s = run_slice(pol.node, name);
  uint64_t id = 0;
  for (auto& g : n.datapath().cgroups())
    if (g.klass == static_cast<size_t>(k) && g.dir == s.dir) id = g.id;
  if (!id) return reply_error(ErrorCode::Failed, fmt::format("cgroup {} is not matched", *dir));
  json out = {{"class", name}, {"cgroup", *dir}, {"slice", s.unit}, {"id", id}};
  // a multipath class's sockets are made MPTCP by the kernel hook, or, where
  // the kernel refuses it, by mptcpize's library in the command (dpctl)
  if (pol.classes[static_cast<size_t>(k)].multipath)
    out["mptcp"] = n.datapath().mptcp_conversion_error().empty() ? "kernel" : "preload";
  return reply_ok(out);
}

// dpctl env: launch-time settings for the class's rails now.
json class_env(const Node& n, const json& args) {
  const Policy& pol = n.policy();
  const std::string name = arg(args, "class");
  int k = pol.class_index(name);
  if (k < 0) return reply_error(ErrorCode::NotFound, fmt::format("no class named \"{}\"", name));
  auto d = n.datapath().decision(static_cast<size_t>(k));
  if (!d) return reply_error(ErrorCode::Failed, d.error().what());
  std::vector<EnvRail> rails;
  for (size_t p = 0; p < pol.paths.size(); ++p) {
    uint16_t share = d->share[n.datapath().rail_slot(p)];
    if (!share) continue;
    EnvRail r{pol.paths[p].name, pol.paths[p].interface, 100.0 * share / DP_SHARE_SCALE, {}};
    for (auto& port : n.measurements().rdma_ports(r.interface))
      r.rdma.push_back(
          {port.device, port.port, roce_v2_gid_index(pol.measurement.rdma_sysfs, port)});
    rails.push_back(std::move(r));
  }
  std::stable_sort(rails.begin(), rails.end(),
                   [](const EnvRail& a, const EnvRail& b) { return a.share > b.share; });
  auto env = launch_env(name, pol.classes[static_cast<size_t>(k)].dscp, rails);
  if (!env) return reply_error(ErrorCode::NoRdma, env.error().what());
  return reply_ok(*env);
}

const Arg kClassArg{"class", ArgType::String, true, "class name"};

}  // namespace

std::vector<Command> class_commands(Node& n) {
  return {
      {"class.list",
       false,
       "classes with ports, mark, rail now and bytes",
       {},
       [&n](const json&) { return reply_ok(classes_json(n)); }},
      {"class.show",
       false,
       "one class in detail, with its newest events",
       {kClassArg},
       [&n](const json& args) { return class_show(n, args); }},
      {"class.env",
       false,
       "launch settings that put a framework's RDMA traffic on the class's rails",
       {kClassArg},
       [&n](const json& args) { return class_env(n, args); }},
      {"class.set",
       true,
       "pin a class to a path",
       {kClassArg, {"path", ArgType::String, true, "path name"}},
       [&n](const json& args) { return class_set(n, args); }},
      {"class.unpin",
       true,
       "give a class pinned with class.set back to the scheduler",
       {kClassArg},
       [&n](const json& args) { return class_unpin(n, args); }},
      {"class.run",
       true,
       "the class's run slice, for a command launched in the class",
       {kClassArg},
       [&n](const json& args) { return class_run(n, args); }},
  };
}

}  // namespace dp

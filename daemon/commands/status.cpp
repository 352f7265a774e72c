// SPDX-License-Identifier: Apache-2.0
// status: the daemon, its policy and datapath in one object; node.check:
// dpctl validate's local half, the node's rails against the policy, now.
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "command.h"
#include "dualpath/core/views.h"
#include "dualpath/kernel/procfs.h"
#include "dualpath/kernel/routing.h"
#include "dualpath/version.h"

namespace dp {

namespace {

json status(const Node& n) {
  const Policy& pol = n.policy();
  const NodeState& s = n.state();
  return json{
      {"node", pol.node},
      {"version", kVersion},
      {"pid", ::getpid()},
      {"policy", {{"file", pol.file}, {"hash", pol.hash}, {"disk_hash", policy_disk_hash(n)}}},
      {"uptime_s",
       std::chrono::duration<double>(std::chrono::steady_clock::now() - s.started).count()},
      {"adopted", n.datapath().adopted()},
      {"layout",
       {{"version", DP_LAYOUT_VERSION},
        {"found", n.datapath().found_layout()},
        {"upgrade", n.datapath().upgrade_report()}}},
      {"bpffs", n.datapath().pin_dir()},
      {"generation", n.datapath().generation()},
      {"paths", pol.paths.size()},
      {"classes", pol.classes.size()},
      {"ticks", s.ticks},
      {"paths_carrying", n.controller().paths_carrying()},
      {"all_paths_down", n.controller().all_down()},
      {"flowlet_gap_us", static_cast<double>(n.datapath().flowlet_gap_ns()) / 1000},
      {"placement",
       {{"mode", pol.topology != Topology::Shared ? "connections"
                 : pol.scheduler.burst_placement  ? "bursts"
                 : pol.scheduler.flowcell         ? "cells"
                                                  : "flowlets"},
        {"flowcell_bytes", pol.scheduler.flowcell},
        {"flowcell_order", pol.scheduler.flowcell_any_order ? "any" : "keep"},
        {"planned_flows", n.datapath().planned_flows()}}},
      {"topology", to_string(pol.topology)},
      {"steering", render_steering(pol)},
      {"checks", to_json(s.checks)},
      {"connections_reset", s.connections_reset},
      {"multipath",
       {{"classes", pol.has_multipath()},
        {"running", n.multipath().running()},
        {"error", s.multipath_error}}},
  };
}

json node_check(const Node& n) {
  const Policy& pol = n.policy();
  json checks = json::array();
  auto add = [&](const std::string& path, const std::string& what, bool good, std::string detail) {
    checks.push_back(
        {{"path", path}, {"check", what}, {"ok", good}, {"detail", std::move(detail)}});
  };
  json mtus = json::object();
  auto missing = Routing::missing(pol, n.controller().routed_around_for(pol));
  for (size_t i = 0; i < pol.paths.size(); ++i) {
    const auto& ps = pol.paths[i];
    int mtu = interface_mtu(ps.interface);
    mtus[ps.name] = mtu;
    bool carrier = PathMonitor::carrier_of(ps.interface);
    add(ps.name, "link", carrier,
        mtu == 0 ? fmt::format("{} does not exist", ps.interface)
        : carrier
            ? fmt::format("{} up, carrier, mtu {}", ps.interface, mtu)
            : fmt::format("{} has no carrier or is down (mtu {}): check the cable, the switch "
                          "port and `ip link show {}`",
                          ps.interface, mtu, ps.interface));
    if (!missing) {
      add(ps.name, "routes", false, "cannot list routes: " + missing.error().what());
    } else {
      std::string gone;
      for (const auto& o : *missing)
        if (o.text.find(fmt::format("table {} ", ps.table)) != std::string::npos ||
            o.text.find(fmt::format("lookup {}", ps.table)) != std::string::npos)
          gone += (gone.empty() ? "" : "; ") + o.text;
      add(ps.name, "routes", gone.empty(),
          gone.empty()
              ? fmt::format("rules and routes of table {} in place", ps.table)
              : "missing (removed by someone else? dpctl policy reload puts them back): " + gone);
    }
    auto h = health_json(n, i);
    std::string state = h["state"];
    bool usable = state == "up" || state == "ramping";
    add(ps.name, "health", usable,
        fmt::format(
            "{} for {:.0f}s{}", state, h["seconds"].get<double>(),
            h["reason"].get<std::string>().empty() ? "" : ": " + h["reason"].get<std::string>()));
    if (pol.health.bfd && !h["bfd"].is_null()) {
      const auto& b = h["bfd"];
      std::string st = b["state"];
      add(ps.name, "bfd", st == "up",
          st == "up"
              ? fmt::format("session to {} up", b["peer"].get<std::string>())
              : fmt::format("session to {} is {} (remote {}, diag {}): the peer's "
                            "dualpathd or BFD is not answering over this rail",
                            b["peer"].get<std::string>(), st, b["remote_state"].get<std::string>(),
                            b["diag"].get<std::string>()));
    }
  }
  // The shared topology moves established flows between rails, with
  // segments sized for the rail they began on: one the other rail's MTU is
  // too small for is dropped there, and the drops look like a failing rail.
  // (The separate topology places a connection once: its MTU is its rail's.)
  if (pol.topology == Topology::Shared) {
    std::string sizes;
    int lo = 0, hi = 0;
    for (const auto& [name, m] : mtus.items()) {
      int v = m.get<int>();
      if (v == 0) continue;
      sizes += fmt::format("{}{} {}", sizes.empty() ? "" : ", ", name, v);
      lo = lo == 0 ? v : std::min(lo, v);
      hi = std::max(hi, v);
    }
    add("-", "mtu", lo == hi,
        lo == hi ? fmt::format("every rail's MTU is {}", hi)
                 : fmt::format("the rails' MTUs differ ({}): a flow moved to a rail with a "
                               "smaller MTU loses its larger segments there; set the same MTU "
                               "on every rail (and the switch ports between)",
                               sizes));
  }
  for (const auto& c : check_node(pol)) add(c.path, c.what, c.ok, c.detail);
  auto eph = read_ephemeral_ports();
  auto warnings = ephemeral_port_warnings(pol, eph);
  add("-", "ports", warnings.empty(),
      warnings.empty()
          ? fmt::format("class ports are outside the ephemeral range {}-{} or reserved", eph.lo,
                        eph.hi)
          : warnings.front() +
                (warnings.size() > 1 ? fmt::format(" (and {} more)", warnings.size() - 1) : ""));
  return {{"node", pol.node},
          {"topology", to_string(pol.topology)},
          {"checks", checks},
          {"mtu", mtus},
          {"responder", n.responder_status()}};
}

}  // namespace

std::vector<Command> status_commands(Node& n) {
  return {
      {"status",
       false,
       "daemon, policy and datapath summary",
       {},
       [&n](const json&) { return reply_ok(status(n)); }},
      {"node.check",
       false,
       "the node's rails against the policy, now (dpctl validate)",
       {},
       [&n](const json&) { return reply_ok(node_check(n)); }},
  };
}

}  // namespace dp

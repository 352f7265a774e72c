// SPDX-License-Identifier: Apache-2.0
// dpctl status [--ready [--all-paths]]: the daemon, its policy and datapath.
#include <iostream>

#include "dpctl.h"

namespace dpctl {

namespace {

// "bursts (a burst ends after 4 ms idle), 5 flows planned", "cells of 16 KiB,
// in order", "flowlets (gap 500 us)", "connections (separate topology)"
std::string placement_line(const json& d) {
  double gap_us = d["flowlet_gap_us"].get<double>();
  if (!d.contains("placement")) return fmt::format("flowlets (gap {:.0f} us)", gap_us);
  const json& p = d["placement"];
  std::string mode = p.value("mode", "flowlets");
  if (mode == "bursts")
    return fmt::format("bursts (a burst ends after {:.0f} us idle), {} flow{} planned", gap_us,
                       p.value("planned_flows", 0), p.value("planned_flows", 0) == 1 ? "" : "s");
  if (mode == "cells")
    return fmt::format("cells of {} KiB, {}", p.value("flowcell_bytes", 0) / 1024,
                       p.value("flowcell_order", "keep") == "any" ? "in any order" : "in order");
  if (mode == "connections") return "connections, when made (separate topology)";
  return fmt::format("flowlets (gap {:.0f} us)", gap_us);
}

// Why the policy's multipath classes keep one subflow, from a status reply
// ("" when they do not).
std::string multipath_error(const json& d) {
  return d.contains("multipath") ? str(d["multipath"]["error"]) : std::string();
}

// Why this node is not ready to carry traffic, from a status reply: a
// probe's readiness and a rollout's health gate. Empty when it is.
std::vector<std::string> not_ready(const json& d, bool all_paths) {
  std::vector<std::string> why;
  const json& pol = d["policy"];
  if (pol.contains("disk_hash") && pol["disk_hash"] != pol["hash"])
    why.push_back(fmt::format("{} is not the running policy (hash {} runs; {})", str(pol["file"]),
                              str(pol["hash"]),
                              pol["disk_hash"].is_null() ? "the file cannot be read"
                                                         : "a reload of it was refused or is due"));
  uint64_t paths = d.value("paths", uint64_t{0}), carrying = d.value("paths_carrying", uint64_t{0});
  if (d.value("all_paths_down", false) || carrying == 0)
    why.push_back("no path carries traffic");
  else if (all_paths && carrying < paths)
    why.push_back(fmt::format("{} of {} paths carry traffic (dpctl path list)", carrying, paths));
  if (std::string mp = multipath_error(d); !mp.empty())
    why.push_back(fmt::format(
        "multipath classes keep one subflow: {} (set it on the node: dualpath-policy(5), "
        "\"multipath\")",
        mp));
  return why;
}

int cmd_status(const Globals& g, bool ready, bool all_paths) {
  int rc;
  auto d = request(g, "status", json::object(), &rc);
  if (!d) return rc;
  if (ready || all_paths) {
    auto why = not_ready(*d, all_paths);
    if (g.json_out) {
      json out = *d;
      out["ready"] = why.empty();
      out["not_ready"] = why;
      print_json(g, out);
    } else if (why.empty()) {
      std::cout << "ready: " << str((*d)["node"]) << " runs " << str((*d)["policy"]["file"])
                << " (hash " << str((*d)["policy"]["hash"]) << "), " << (*d)["paths_carrying"]
                << " of " << (*d)["paths"] << " paths carrying traffic\n";
    } else {
      for (auto& w : why) std::cerr << "not ready: " << w << "\n";
    }
    return why.empty() ? 0 : 1;
  }
  if (g.json_out) return print_json(g, *d), 0;
  std::cout << "node:       " << str((*d)["node"]) << "\n"
            << "policy:     " << str((*d)["policy"]["file"]) << " (hash "
            << str((*d)["policy"]["hash"]) << ")\n"
            << "daemon:     pid " << (*d)["pid"] << ", version " << str((*d)["version"]) << ", up "
            << fmt::format("{:.0f}s", (*d)["uptime_s"].get<double>())
            << ((*d)["adopted"].get<bool>() ? ", adopted a pinned datapath" : "") << "\n"
            << "datapath:   pinned in " << str((*d)["bpffs"]) << ", generation "
            << (*d)["generation"] << ", layout " << (*d)["layout"]["version"] << "\n"
            << "paths:      " << (*d)["paths"] << " (" << (*d)["paths_carrying"]
            << " carrying traffic), classes: " << (*d)["classes"] << "\n"
            << "placement:  " << placement_line(*d) << "\n";
  auto& layout = (*d)["layout"];
  if (!layout["upgrade"].empty()) {
    std::cout << "upgraded:   from layout " << layout["found"] << ":\n";
    for (auto& line : layout["upgrade"]) std::cout << "            " << str(line) << "\n";
  }
  if (d->contains("topology")) {
    bool separate = (*d)["topology"] == "separate";
    std::cout << "topology:   " << str((*d)["topology"])
              << (separate ? " (each rail its own network: connections placed when made)"
                           : " (both rails reach the peers: flows may move between rails)")
              << "\n";
    for (auto& e : (*d)["steering"])
      std::cout << "  "
                << fmt::format("{:<20} {:<8} {}", str(e["prefix"]), str(e["path"]),
                               str(e["steering"]))
                << "\n";
    if (separate && (*d)["connections_reset"].get<uint64_t>())
      std::cout << "            " << (*d)["connections_reset"]
                << " connections ended on failed rails (they reconnect elsewhere)\n";
    for (auto& c : (*d)["checks"])
      if (!c["ok"].get<bool>())
        std::cout << "CHECK:      " << str(c["path"]) << " " << str(c["check"]) << ": "
                  << str(c["detail"]) << "\n";
  }
  const json& pol = (*d)["policy"];
  if (pol.contains("disk_hash") && pol["disk_hash"] != pol["hash"])
    std::cout << "NOTE:       " << str(pol["file"])
              << (pol["disk_hash"].is_null() ? " cannot be read"
                                             : " has changed on disk and is not loaded")
              << " (dpctl policy diff " << str(pol["file"]) << ")\n";
  if (std::string mp = multipath_error(*d); !mp.empty())
    std::cout << "WARNING:    multipath classes keep one subflow: " << mp << "\n";
  if ((*d)["all_paths_down"].get<bool>())
    std::cout << "WARNING:    every path is down; the last decisions and routing are kept\n";
  return 0;
}

}  // namespace

void add_status(CLI::App& app, const Globals& g, Action& action) {
  struct Opts {
    bool ready = false, all_paths = false;
  };
  auto o = std::make_shared<Opts>();
  auto* status = app.add_subcommand("status", "daemon, policy and datapath summary");
  status->add_flag("--ready", o->ready,
                   "exit 1 unless the daemon runs its policy file as it is on disk and a path "
                   "carries traffic (a readiness probe, a rollout's health gate)");
  status->add_flag("--all-paths", o->all_paths, "with --ready: every path must carry traffic");
  status->callback(
      [&g, &action, o] { action = [&g, o] { return cmd_status(g, o->ready, o->all_paths); }; });
}

}  // namespace dpctl

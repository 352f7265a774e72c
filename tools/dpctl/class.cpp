// SPDX-License-Identifier: Apache-2.0
// dpctl class list | set CLASS PATH | unpin CLASS
#include <iostream>
#include <set>

#include "dpctl.h"
#include "dualpath/core/units.h"

namespace dpctl {

namespace {

int cmd_class_list(const Globals& g) {
  int rc;
  auto d = request(g, "class.list", json::object(), &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  std::vector<std::vector<std::string>> rows;
  for (auto& c : *d) {
    std::string ports;
    for (auto& p : c["ports"]) ports += (ports.empty() ? "" : ",") + p.get<std::string>();
    std::string rail = str(c["rail"]);
    if (c["rail"].is_null()) {
      rail.clear();
      for (auto& [k, v] : c["shares"].items())
        if (v.get<double>() > 0)
          rail += fmt::format("{}{}:{:.0f}%", rail.empty() ? "" : ",", k, v.get<double>());
    }
    // what the rails carried under the decision (decided_shares), "-" until
    // there is enough
    std::string carried;
    if (const json cs = c.value("carried_shares", json(nullptr)); cs.is_object())
      for (auto& [k, v] : cs.items())
        carried += fmt::format("{}{}:{:.0f}%", carried.empty() ? "" : ",", k, v.get<double>());
    std::string by_path;
    for (auto& [k, v] : c["tx_bytes_by_path"].items())
      by_path +=
          fmt::format("{}{}={}", by_path.empty() ? "" : " ", k, dp::format_bytes(v.get<double>()));
    // the NCCL plugins' bytes in the class (nccl.report), beside the kernel's
    if (const json n = c.value("nccl_tx_bytes_by_path", json(nullptr)); n.is_object()) {
      std::string nccl;
      double sum = 0;
      for (auto& [k, v] : n.items()) {
        sum += v.get<double>();
        nccl += fmt::format(" {}={}", k, dp::format_bytes(v.get<double>()));
      }
      if (sum > 0) by_path += "; NCCL plugin" + nccl;
    }
    if (c.value("placement", "") == "connect-time") {
      std::string conns;
      for (auto& [k, v] : c["connections_by_path"].items())
        conns += fmt::format("{}{}={}", conns.empty() ? "" : " ", k, v.get<uint64_t>());
      by_path += "; connections " + conns;
      if (uint64_t u = c["connections_unmapped"].get<uint64_t>())
        by_path += fmt::format(", {} left alone", u);
    }
    std::string cgroups;
    // one word per rule, so that the table splits on whitespace: the
    // cgroup's path, the unit's name, or dpctl-run; "(absent)" when missing
    for (auto& cg : c.value("cgroups", json::array())) {
      std::string rule = str(cg["rule"]);
      std::string word = rule == "dpctl run" ? "dpctl-run" : rule.substr(rule.find(' ') + 1);
      cgroups += fmt::format("{}{}{}", cgroups.empty() ? "" : ",", word,
                             cg["present"].get<bool>() ? "" : "(absent)");
    }
    // kept for the class on each rail it is carried on: one figure when it
    // is the same on every rail, else rail:rate for each
    std::string reserve;
    if (const json r = c.value("reserve_bps", json(nullptr)); r.is_object()) {
      std::set<uint64_t> rates;
      for (auto& [k, v] : r.items()) rates.insert(v.get<uint64_t>());
      if (rates.size() == 1)
        reserve = dp::format_bandwidth(static_cast<double>(*rates.begin()));
      else
        for (auto& [k, v] : r.items())
          reserve += fmt::format("{}{}:{}", reserve.empty() ? "" : ",", k,
                                 dp::format_bandwidth(v.get<double>()));
    }
    // the class's minimum RTO, "-" for the kernel's (200 ms)
    const json rto = c.value("rto_min_ms", json(nullptr));
    rows.push_back({str(c["name"]), str(c["kind"]), std::to_string(c["priority"].get<int>()),
                    ports.empty() ? "-" : ports, cgroups.empty() ? "-" : cgroups,
                    c["mark"].is_null() ? "-" : fmt::format("{:#x}", c["mark"].get<uint32_t>()),
                    rto.is_number() ? fmt::format("{:g}ms", rto.get<double>()) : "-",
                    reserve.empty() ? "-" : reserve,
                    rail + (c["pinned"].get<bool>() ? " (pinned)" : ""),
                    carried.empty() ? "-" : carried, by_path});
  }
  print_table({"CLASS", "KIND", "PRIO", "PORTS", "CGROUPS", "MARK", "RTO MIN", "RESERVE", "RAIL",
               "CARRIED", "TX BYTES"},
              rows);
  return 0;
}

int cmd_class_set(const Globals& g, const std::string& cls, const std::string& path) {
  int rc;
  auto d = request(g, "class.set", {{"class", cls}, {"path", path}}, &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  std::cout << "class " << cls << " pinned to path " << path << "\n";
  return 0;
}

int cmd_class_unpin(const Globals& g, const std::string& cls) {
  int rc;
  auto d = request(g, "class.unpin", {{"class", cls}}, &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  std::cout << "class " << cls << " unpinned: the scheduler decides its rails again\n";
  return 0;
}

}  // namespace

void add_class(CLI::App& app, const Globals& g, Action& action) {
  struct Opts {
    std::string klass, path;
  };
  auto o = std::make_shared<Opts>();
  auto* cls = app.add_subcommand("class", "the traffic classes")->require_subcommand(1);
  cls->add_subcommand("list", "classes with ports, mark, rail now and bytes")
      ->callback([&g, &action] { action = [&g] { return cmd_class_list(g); }; });
  auto* set = cls->add_subcommand("set", "pin a class to a path");
  set->add_option(kClass, o->klass, "class name")->required();
  set->add_option(kPath, o->path, "path name")->required();
  set->callback(
      [&g, &action, o] { action = [&g, o] { return cmd_class_set(g, o->klass, o->path); }; });
  auto* unpin =
      cls->add_subcommand("unpin", "give a class pinned with `class set` back to the scheduler");
  unpin->add_option(kClass, o->klass, "class name")->required();
  unpin->callback([&g, &action, o] { action = [&g, o] { return cmd_class_unpin(g, o->klass); }; });
}

}  // namespace dpctl

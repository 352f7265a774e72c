// SPDX-License-Identifier: Apache-2.0
// dpctl class list | show CLASS | set CLASS PATH | unpin CLASS
#include <iostream>
#include <set>

#include "dpctl.h"
#include "dualpath/core/units.h"

namespace dpctl {

namespace {

// The columns of dpctl class list, each from one class's JSON, which dpctl
// class show prints one per line.
std::string ports_text(const json& c) {
  std::string ports;
  for (auto& p : c["ports"]) ports += (ports.empty() ? "" : ",") + p.get<std::string>();
  return ports.empty() ? "-" : ports;
}

// The rail, or each rail's share; "(pinned)" after a pin.
std::string rail_text(const json& c) {
  std::string rail = str(c["rail"]);
  if (c["rail"].is_null()) rail = shares_text(c["shares"], true);
  return rail + (c["pinned"].get<bool>() ? " (pinned)" : "");
}

// What the rails carried under the decision (decided_shares), "-" until
// there is enough.
std::string carried_text(const json& c) {
  std::string carried = shares_text(c.value("carried_shares", json(nullptr)), false);
  return carried.empty() ? "-" : carried;
}

std::string tx_bytes_text(const json& c) {
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
  return by_path;
}

// One word per rule, so that the table splits on whitespace: the cgroup's
// path, the unit's name, or dpctl-run; "(absent)" when missing.
std::string cgroups_text(const json& c) {
  std::string cgroups;
  for (auto& cg : c.value("cgroups", json::array())) {
    std::string rule = str(cg["rule"]);
    std::string word = rule == "dpctl run" ? "dpctl-run" : rule.substr(rule.find(' ') + 1);
    cgroups += fmt::format("{}{}{}", cgroups.empty() ? "" : ",", word,
                           cg["present"].get<bool>() ? "" : "(absent)");
  }
  return cgroups.empty() ? "-" : cgroups;
}

// Kept for the class on each rail it is carried on: one figure when it is
// the same on every rail, else rail:rate for each.
std::string reserve_text(const json& c) {
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
  return reserve.empty() ? "-" : reserve;
}

std::string mark_text(const json& c) {
  return c["mark"].is_null() ? "-" : fmt::format("{:#x}", c["mark"].get<uint32_t>());
}

// The class's minimum RTO, "-" for the kernel's (200 ms).
std::string rto_text(const json& c) {
  const json rto = c.value("rto_min_ms", json(nullptr));
  return rto.is_number() ? fmt::format("{:g}ms", rto.get<double>()) : "-";
}

int cmd_class_list(const Globals& g) {
  int rc;
  auto d = request(g, "class.list", json::object(), &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  std::vector<std::vector<std::string>> rows;
  for (auto& c : *d)
    rows.push_back({str(c["name"]), str(c["kind"]), std::to_string(c["priority"].get<int>()),
                    ports_text(c), cgroups_text(c), mark_text(c), rto_text(c), reserve_text(c),
                    rail_text(c), carried_text(c), tx_bytes_text(c)});
  print_table({"CLASS", "KIND", "PRIO", "PORTS", "CGROUPS", "MARK", "RTO MIN", "RESERVE", "RAIL",
               "CARRIED", "TX BYTES"},
              rows);
  return 0;
}

int cmd_class_show(const Globals& g, const std::string& cls) {
  int rc;
  auto d = request(g, "class.show", {{"class", cls}}, &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  const json& c = *d;
  std::cout << fmt::format("class {}: {}, priority {}", str(c["name"]), str(c["kind"]),
                           c["priority"].get<int>())
            << (c.value("multipath", false) ? ", multipath" : "") << "\n";
  const std::string pinned_by = c.value("pinned_by", "");
  const std::pair<const char*, std::string> lines[] = {
      {"ports", ports_text(c)},
      {"cgroups", cgroups_text(c)},
      {"mark", mark_text(c)},
      {"placement", c.value("placement", "-")},
      {"rto min", rto_text(c)},
      {"reserve", reserve_text(c)},
      {"rail", rail_text(c) + (pinned_by.empty() ? "" : " by " + pinned_by)},
      {"carried", carried_text(c)},
      {"tx bytes", tx_bytes_text(c)},
  };
  for (const auto& [k, v] : lines) std::cout << fmt::format("  {:<10} {}\n", k, v);
  const json& events = c["events"];
  if (events.empty()) {
    std::cout << "no events of this class yet\n";
    return 0;
  }
  std::cout << fmt::format("its newest {} event{}:\n", events.size(),
                           events.size() == 1 ? "" : "s");
  for (const auto& e : events) print_event(e);
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
  auto* show = cls->add_subcommand("show", "one class in detail, with its newest events");
  show->add_option(kClass, o->klass, "class name")->required();
  show->callback([&g, &action, o] { action = [&g, o] { return cmd_class_show(g, o->klass); }; });
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

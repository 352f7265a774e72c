// SPDX-License-Identifier: Apache-2.0
// dpctl flow list [--top N] [--class CLASS] [--path PATH]
#include <iostream>

#include "dpctl.h"
#include "dualpath/core/units.h"

namespace dpctl {

namespace {

int cmd_flow_list(const Globals& g, const json& args) {
  int rc;
  auto d = request(g, "flow.list", args, &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  std::vector<std::vector<std::string>> rows;
  for (auto& f : (*d)["flows"]) {
    bool v6 = f["src"].get<std::string>().find(':') != std::string::npos;
    auto ep = [&](const char* a, const char* p) {
      return v6 ? fmt::format("[{}]:{}", f[a].get<std::string>(), f[p].get<int>())
                : fmt::format("{}:{}", f[a].get<std::string>(), f[p].get<int>());
    };
    rows.push_back(
        {str(f["proto"]), ep("src", "sport"), ep("dst", "dport"), str(f["class"]),
         f.value("rule", "").empty() ? "-" : str(f["rule"]), str(f["path"]),
         dp::format_bytes(f["bytes"].get<double>()),
         f["srtt_us"].get<uint32_t>() ? fmt::format("{} us", f["srtt_us"].get<uint32_t>()) : "-",
         std::to_string(f["retrans_segs"].get<uint32_t>()),
         fmt::format("{:.1f}s", f["idle_s"].get<double>())});
  }
  print_table(
      {"PROTO", "SOURCE", "DESTINATION", "CLASS", "BY", "PATH", "BYTES", "SRTT", "RETRANS", "IDLE"},
      rows);
  std::cout << rows.size() << " of " << (*d)["total"] << " flows in the flow table\n";
  if (d->contains("nccl")) {
    // NCCL plugins: their streams are not in the table, their reports are
    std::cout << "\n"
              << (*d)["nccl"].size() << " NCCL plugin process"
              << ((*d)["nccl"].size() == 1 ? "" : "es") << " (their own counts)\n";
    std::vector<std::vector<std::string>> procs;
    for (auto& p : (*d)["nccl"])
      for (auto& s : p["sent"])
        procs.push_back({std::to_string(p["pid"].get<int>()), str(p["process"]), str(s["class"]),
                         str(s["path"]), dp::format_bytes(s["bytes"].get<double>()),
                         s["bytes_per_s"].is_number()
                             ? dp::format_bandwidth(s["bytes_per_s"].get<double>() * 8)
                             : "-",
                         fmt::format("{:.1f}s ago{}", p["reported_s_ago"].get<double>(),
                                     p["scheduled"].get<bool>() ? "" : ", unmarked")});
    print_table({"PID", "PROCESS", "CLASS", "PATH", "BYTES", "RATE", "REPORTED"}, procs);
  }
  if (!d->contains("mptcp")) return 0;
  // multipath classes: a connection per line, then its subflows
  std::cout << "\n"
            << (*d)["mptcp"].size() << " MPTCP connection" << ((*d)["mptcp"].size() == 1 ? "" : "s")
            << " of multipath classes\n";
  std::vector<std::vector<std::string>> subs;
  for (auto& c : (*d)["mptcp"]) {
    auto ep = [](const json& j, const char* a, const char* p) {
      std::string ip = j[a].get<std::string>();
      return ip.find(':') != std::string::npos ? fmt::format("[{}]:{}", ip, j[p].get<int>())
                                               : fmt::format("{}:{}", ip, j[p].get<int>());
    };
    subs.push_back({fmt::format("{:#010x}", c["token"].get<uint32_t>()), str(c["class"]),
                    str(c["side"]), ep(c, "local", "lport"), ep(c, "remote", "rport"), "", "", ""});
    for (auto& s : c["subflows"])
      subs.push_back({"", "", "", "  " + ep(s, "local", "lport"), ep(s, "remote", "rport"),
                      s["path"].is_string()
                          ? str(s["path"]) + (s.value("bound", true) ? "" : " (steered)")
                          : "-",
                      str(s["role"]), dp::format_bytes(s["bytes"].get<double>())});
  }
  print_table({"TOKEN", "CLASS", "SIDE", "LOCAL", "REMOTE", "PATH", "ROLE", "BYTES"}, subs);
  return 0;
}

}  // namespace

void add_flow(CLI::App& app, const Globals& g, Action& action) {
  struct Opts {
    size_t top = 20;
    std::string klass, path;
  };
  auto o = std::make_shared<Opts>();
  auto* flow = app.add_subcommand("flow", "the flow table")->require_subcommand(1);
  auto* list =
      flow->add_subcommand("list", "the heaviest flows, with class, path, bytes, RTT, retransmits");
  list->add_option("--top", o->top, "how many flows")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  list->add_option("--class", o->klass, "only flows of this class")->type_name(kClass);
  list->add_option("--path", o->path, "only flows on this path")->type_name(kPath);
  list->callback([&g, &action, o] {
    action = [&g, o] {
      json args{{"top", o->top}};
      if (!o->klass.empty()) args["class"] = o->klass;
      if (!o->path.empty()) args["path"] = o->path;
      return cmd_flow_list(g, args);
    };
  });
}

}  // namespace dpctl

// SPDX-License-Identifier: Apache-2.0
// dpctl: operate dualpathd.  dpctl [-j] [-p] [--socket PATH] OBJECT COMMAND [ARGS]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

#include "dpctl.h"
#include "dualpath/client/control_socket.h"
#include "dualpath/core/launch_env.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/units.h"
#include "dualpath/version.h"

namespace dpctl {

void print_json(const Globals& g, const json& j) {
  std::cout << (g.pretty ? j.dump(2) : j.dump()) << "\n";
}

// Errors: {"error": ...} on stdout under -j, a sentence on stderr otherwise.
int fail(const Globals& g, const std::string& message, const json& extra) {
  if (g.json_out) {
    json j{{"error", message}};
    if (!extra.is_null()) j["details"] = extra;
    print_json(g, j);
  } else {
    std::cerr << "dpctl: " << message << "\n";
  }
  return 1;
}

std::string str(const json& j) {
  if (j.is_null()) return "-";
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

// Sends a request; prints the error reply and returns nullopt on failure.
std::optional<json> request(const Globals& g, const std::string& cmd, json args, int* rc) {
  auto r = dp::call(g.socket, json{{"cmd", cmd}, {"args", std::move(args)}});
  if (!r) {
    fail(g, r.error().what());
    *rc = kExitUnreachable;
    return std::nullopt;
  }
  if (!(*r).value("ok", false)) {
    auto err = (*r)["error"];
    *rc = fail(g, err.value("message", "request failed"), err);
    return std::nullopt;
  }
  *rc = 0;
  return (*r)["data"];
}

// Column-aligned table.
void print_table(const std::vector<std::string>& head,
                 const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(head.size());
  for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  for (auto& r : rows)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t i = 0; i < r.size(); ++i) {
      s += r[i];
      if (i + 1 < r.size()) s += std::string(w[i] - r[i].size() + 2, ' ');
    }
    std::cout << s << "\n";
  };
  line(head);
  for (auto& r : rows) line(r);
}

}  // namespace dpctl

namespace {

using namespace dpctl;

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
  if ((*d)["all_paths_down"].get<bool>())
    std::cout << "WARNING:    every path is down; the last decisions and routing are kept\n";
  return 0;
}

std::string ago(double s) {
  if (s < 120) return fmt::format("{:.0f}s", s);
  if (s < 7200) return fmt::format("{:.0f}m", s / 60);
  if (s < 172800) return fmt::format("{:.0f}h", s / 3600);
  return fmt::format("{:.0f}d", s / 86400);
}

std::string health_cell(const json& h) {
  if (!h.is_object()) return "-";
  std::string st = str(h["state"]);
  if (st == "ramping") st += fmt::format(" {:.0f}%", 100 * h["weight"].get<double>());
  return st + " " + ago(h["seconds"].get<double>());
}

std::string bfd_cell(const json& h) {
  if (!h.is_object() || !h["bfd"].is_object()) return "off";
  return str(h["bfd"]["state"]);
}

void print_path_detail(const json& p) {
  std::cout << "path " << str(p["name"]) << " (interface " << str(p["interface"]) << ", ifindex "
            << p["ifindex"] << ")\n";
  std::cout << "  capacity    " << dp::format_bandwidth(p["capacity_bps"].get<double>()) << "\n";
  std::cout << "  routing     fwmark " << fmt::format("{:#x}", p["fwmark"].get<uint32_t>())
            << " -> table " << p["table"] << ", gateway " << str(p["gateway"]) << " / "
            << str(p["gateway6"]) << "\n";
  if (const json& h = p["health"]; h.is_object()) {
    std::cout << "  health      " << str(h["state"]) << " since " << str(h["since"]) << " ("
              << ago(h["seconds"].get<double>()) << " ago): " << str(h["reason"]) << "; weight "
              << fmt::format("{:.0f}%", 100 * h["weight"].get<double>()) << ", " << h["failures"]
              << " failures\n";
    if (const json& b = h["bfd"]; b.is_object())
      std::cout << "  bfd         " << str(b["state"]) << " with " << str(b["peer"]) << " (remote "
                << str(b["remote_state"]) << ", diag " << str(b["diag"]) << "), discriminators "
                << b["local_discriminator"] << "/" << b["remote_discriminator"] << ", tx every "
                << b["tx_interval_ms"] << " ms, detection " << b["detection_ms"] << " ms; "
                << b["rx"] << " received, " << b["tx"] << " sent, " << b["discarded"]
                << " discarded\n";
    else
      std::cout << "  bfd         off\n";
  }
  const json& m = p["measure"];
  if (m.is_null()) {
    std::cout << "  measure     no sample yet\n";
  } else {
    std::cout << "  tx          " << dp::format_bandwidth(m["tx_bps"].get<double>()) << ", "
              << fmt::format("{:.1f}%", 100 * m["utilisation"].get<double>())
              << " of capacity (EWMA over ~"
              << fmt::format("{:.2g}s", m["rate_window_s"].get<double>()) << "); datapath counted "
              << dp::format_bytes(p["tx_bytes"].get<double>()) << " in " << p["tx_packets"]
              << " packets\n";
    std::cout << "  rx          " << dp::format_bandwidth(m["rx_bps"].get<double>())
              << "; datapath counted " << dp::format_bytes(p["rx_bytes"].get<double>()) << " in "
              << p["rx_packets"] << " packets\n";
    if (m["rtt"].is_object())
      std::cout << "  rtt         p50 " << fmt::format("{:.0f}", m["rtt"]["p50_us"].get<double>())
                << " us, p95 " << fmt::format("{:.0f}", m["rtt"]["p95_us"].get<double>())
                << " us, p99 " << fmt::format("{:.0f}", m["rtt"]["p99_us"].get<double>()) << " us ("
                << m["rtt"]["samples"] << " samples over "
                << fmt::format("{:.1f}s", m["rtt"]["window_s"].get<double>()) << ")\n";
    else
      std::cout << "  rtt         no TCP samples in the window\n";
    if (m["loss"].is_object())
      std::cout << "  loss        "
                << fmt::format("{:.3f}%", 100 * m["loss"]["ratio"].get<double>()) << " ("
                << m["loss"]["retrans_segs"] << " of " << m["loss"]["segs_out"] << " segments over "
                << fmt::format("{:.1f}s", m["loss"]["window_s"].get<double>()) << ")\n";
    std::cout << "  tcp total   " << m["tcp"]["segs_out"] << " segments, "
              << m["tcp"]["retrans_segs"] << " retransmitted, " << m["tcp"]["rto_events"]
              << " RTOs\n";
    const json& l = m["link"];
    std::cout << "  link        " << (l["oper_up"].get<bool>() ? "up" : "DOWN") << ", tx "
              << dp::format_bytes(l["tx_bytes"].get<double>()) << ", rx "
              << dp::format_bytes(l["rx_bytes"].get<double>()) << ", dropped tx " << l["tx_dropped"]
              << " rx " << l["rx_dropped"] << ", errors tx " << l["tx_errors"] << " rx "
              << l["rx_errors"] << "\n";
    const json& r = m["reconciliation"];
    if (r["agree"].get<bool>())
      std::cout << "  reconcile   datapath and link agree over the last "
                << fmt::format("{:.1f}s", r["window_s"].get<double>()) << "\n";
    else
      std::cout << "  reconcile   DISAGREE: " << str(r["explanation"]) << "\n";
    if (m["rdma"].is_object()) {
      const json& rd = m["rdma"];
      std::string devs;
      for (auto& d : rd["devices"]) devs += (devs.empty() ? "" : ",") + d.get<std::string>();
      std::cout << "  rdma        " << devs << ": tx "
                << dp::format_bandwidth(rd["tx_bps"].get<double>()) << ", rx "
                << dp::format_bandwidth(rd["rx_bps"].get<double>())
                << " (counted in utilisation); CNP sent " << rd["cnp_sent"] << " handled "
                << rd["cnp_handled"] << ", ECN marked " << rd["ecn_marked"] << "; out-of-sequence "
                << rd["out_of_sequence"] << ", sequence errors " << rd["seq_errors"]
                << ", local ACK timeouts " << rd["local_ack_timeouts"] << "\n";
    } else {
      std::cout << "  rdma        no RDMA device on this path\n";
    }
    std::cout << "  sample age  "
              << fmt::format("{:.0f} ms", 1000 * m["sample_age_s"].get<double>()) << "\n";
  }
  std::cout << "  redirected  " << p["redirected_out_packets"] << " packets to another rail\n";
  if (p["tc"].is_object())
    std::cout << "  tc          egress prog " << p["tc"]["egress_prog_id"] << ", ingress prog "
              << p["tc"]["ingress_prog_id"]
              << (p["tc"]["clsact_owned"].get<bool>() ? ", clsact created by dualpath" : "")
              << "\n";
  if (!p["exceptions"].empty()) {
    std::cout << "  passed untouched:";
    for (auto& [k, v] : p["exceptions"].items()) std::cout << " " << k << "=" << v;
    std::cout << "\n";
  }
}

int cmd_path_drain(const Globals& g, const std::string& path, bool on) {
  int rc;
  auto d = request(g, on ? "path.drain" : "path.undrain", {{"path", path}}, &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  std::cout << "path " << path << ": " << str((*d)["health"]["state"]) << " ("
            << str((*d)["health"]["reason"]) << ")\n";
  return 0;
}

int cmd_path_list(const Globals& g) {
  int rc;
  auto d = request(g, "path.list", json::object(), &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  std::vector<std::vector<std::string>> rows;
  for (auto& p : *d) {
    const json& m = p["measure"];
    auto us = [](const json& v) { return fmt::format("{:.0f}", v.get<double>()); };
    std::string rtt = "-", loss = "-", retr = "-", drops = "-", age = "-";
    if (m.is_object()) {
      if (m["rtt"].is_object())
        rtt = us(m["rtt"]["p50_us"]) + "/" + us(m["rtt"]["p95_us"]) + "/" + us(m["rtt"]["p99_us"]);
      if (m["loss"].is_object())
        loss = fmt::format("{:.2f}%", 100 * m["loss"]["ratio"].get<double>());
      retr = fmt::format("{}/{}", m["tcp"]["retrans_segs"].get<uint64_t>(),
                         m["tcp"]["rto_events"].get<uint64_t>());
      drops = fmt::format(
          "{}/{}",
          m["link"]["tx_dropped"].get<uint64_t>() + m["link"]["rx_dropped"].get<uint64_t>(),
          m["link"]["tx_errors"].get<uint64_t>() + m["link"]["rx_errors"].get<uint64_t>());
      age = fmt::format("{:.0f}ms", 1000 * m["sample_age_s"].get<double>());
      if (!m["reconciliation"]["agree"].get<bool>()) age += " !";
    }
    rows.push_back({str(p["name"]), str(p["interface"]), health_cell(p["health"]),
                    bfd_cell(p["health"]), dp::format_bandwidth(p["capacity_bps"].get<double>()),
                    dp::format_bandwidth(p["tx_bps"].get<double>()),
                    fmt::format("{:.1f}%", 100 * p["utilisation"].get<double>()), rtt, loss, retr,
                    drops, std::to_string(p["redirected_out_packets"].get<uint64_t>()), age});
  }
  print_table({"PATH", "IFACE", "HEALTH", "BFD", "CAPACITY", "TX RATE", "UTIL", "RTT us p50/95/99",
               "LOSS", "RETX/RTO", "DROP/ERR", "REDIRECTED", "AGE"},
              rows);
  for (auto& p : *d)
    if (p["health"].is_object() && str(p["health"]["state"]) != "up")
      std::cout << str(p["name"]) << ": " << str(p["health"]["reason"]) << "\n";
  return 0;
}

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
                      s["path"].is_string() ? str(s["path"]) : "-", str(s["role"]),
                      dp::format_bytes(s["bytes"].get<double>())});
  }
  print_table({"TOKEN", "CLASS", "SIDE", "LOCAL", "REMOTE", "PATH", "ROLE", "BYTES"}, subs);
  return 0;
}

int cmd_path_show(const Globals& g, const std::string& name) {
  int rc;
  auto d = request(g, "path.show", {{"path", name}}, &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  print_path_detail(*d);
  return 0;
}

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
    std::string by_path;
    for (auto& [k, v] : c["tx_bytes_by_path"].items())
      by_path +=
          fmt::format("{}{}={}", by_path.empty() ? "" : " ", k, dp::format_bytes(v.get<double>()));
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
    // the class's minimum RTO, "-" for the kernel's (200 ms)
    const json rto = c.value("rto_min_ms", json(nullptr));
    rows.push_back({str(c["name"]), str(c["kind"]), std::to_string(c["priority"].get<int>()),
                    ports.empty() ? "-" : ports, cgroups.empty() ? "-" : cgroups,
                    c["mark"].is_null() ? "-" : fmt::format("{:#x}", c["mark"].get<uint32_t>()),
                    rto.is_number() ? fmt::format("{:g}ms", rto.get<double>()) : "-",
                    rail + (c["pinned"].get<bool>() ? " (pinned)" : ""), by_path});
  }
  print_table({"CLASS", "KIND", "PRIO", "PORTS", "CGROUPS", "MARK", "RTO MIN", "RAIL", "TX BYTES"},
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

void print_event(const json& e) {
  auto shares = [](const json& s) {
    std::string out;
    for (auto& [k, v] : s.items())
      if (v.get<double>() > 0)
        out += fmt::format("{}{} {:.0f}%", out.empty() ? "" : ", ", k, v.get<double>());
    return out.empty() ? std::string("none") : out;
  };
  if (e["class"].is_null()) {  // a path's health
    std::cout << str(e["time"]) << "  " << (e["path"].is_null() ? "node" : str(e["path"])) << "  "
              << str(e["kind"]) << "\n    " << str(e["reason"]) << "\n";
    return;
  }
  std::cout << str(e["time"]) << "  " << str(e["class"]) << "  " << str(e["kind"]) << "  "
            << shares(e["before"]) << " -> " << shares(e["after"]) << "\n    " << str(e["reason"])
            << "\n";
}

int cmd_events(const Globals& g, bool follow, uint64_t since) {
  for (;;) {
    int rc;
    auto d = request(g, "events", {{"since", since}}, &rc);
    if (!d) return rc;
    if (g.json_out && !follow) return print_json(g, *d), 0;
    for (auto& e : (*d)["events"]) {
      if (g.json_out)
        std::cout << e.dump() << "\n";
      else
        print_event(e);
      since = std::max<uint64_t>(since, e["seq"].get<uint64_t>());
    }
    std::cout.flush();
    if (!follow) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

int cmd_class_unpin(const Globals& g, const std::string& cls) {
  int rc;
  auto d = request(g, "class.unpin", {{"class", cls}}, &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  std::cout << "class " << cls << " unpinned: the scheduler decides its rails again\n";
  return 0;
}

// dpctl run: the command's process joins the class's run slice, through
// systemd when it is PID 1 (a transient scope in the slice), directly
// otherwise; then it becomes the command. Exit codes as env(1): 125 dpctl,
// 126 not executable, 127 not found.
constexpr const char* kMptcpize = "/usr/bin/mptcpize";

int cmd_run(const Globals& g, const std::string& cls, const std::vector<std::string>& argv) {
  int rc;
  auto d = request(g, "class.run", {{"class", cls}}, &rc);
  if (!d) return 125;
  std::string cgroup = str((*d)["cgroup"]), slice = str((*d)["slice"]);
  std::vector<std::string> args;
  std::error_code ec;
  if (std::filesystem::exists("/run/systemd/system", ec) &&
      ::access("/usr/bin/systemd-run", X_OK) == 0) {
    args = {"/usr/bin/systemd-run", "--scope", "--quiet", "--collect", "--slice=" + slice, "--"};
  } else {
    std::ofstream procs(cgroup + "/cgroup.procs");
    procs << "0\n";  // 0: the writing process
    procs.flush();
    if (!procs) {
      std::cerr << "dpctl: cannot join cgroup " << cgroup << ": " << std::strerror(errno) << "\n";
      return 125;
    }
  }
  if (d->value("mptcp", "") == "preload") {
    // the kernel cannot make the class's sockets MPTCP (no fmod_ret on
    // update_socket_protocol): mptcpize's library does it in the command
    if (::access(kMptcpize, X_OK) != 0) {
      std::cerr << "dpctl: class " << cls
                << " is multipath, and this kernel cannot make its sockets MPTCP; install "
                   "mptcpize (apt install mptcpize) so that dpctl run can\n";
      return 125;
    }
    args.insert(args.end(), {kMptcpize, "run"});
  }
  args.insert(args.end(), argv.begin(), argv.end());
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execvp(cargs[0], cargs.data());
  int err = errno;
  std::cerr << "dpctl: cannot run " << args.front() << ": " << std::strerror(err) << "\n";
  return err == ENOENT ? 127 : 126;
}

int cmd_env(const Globals& g, const std::string& cls, const std::string& format) {
  int rc;
  auto d = request(g, "class.env", {{"class", cls}}, &rc);
  if (!d) return rc;
  if (g.json_out || format == "json") return print_json(g, *d), 0;
  std::cout << "# dualpath: launch settings for class " << cls << " (";
  bool first = true;
  for (auto& r : (*d)["rails"]) {
    std::cout << (first ? "" : ", ") << str(r["path"]) << " "
              << fmt::format("{:.0f}%", r["share"].get<double>()) << " on " << str(r["rdma_device"])
              << ":" << r["rdma_port"] << "/" << str(r["interface"]);
    first = false;
  }
  std::cout << ")\n";
  for (auto& n : (*d)["notes"]) std::cout << "# " << str(n) << "\n";
  std::cout << dp::env_as_shell((*d)["env"]);
  return 0;
}

// The words naming an object and a command, as ip(8) takes them: a prefix
// stands for the one word it begins ("dpctl pa l" is "dpctl path list"); a
// prefix of several words is refused with them ("dpctl e": env or events?);
// a word that is no command's is named, with the nearest one. "help" at any
// level, and an object without its command ("dpctl path"), show that level's
// help. Returns an error message, or "" with argv's words expanded.
std::string expand_commands(CLI::App& app, std::vector<std::string>& args) {
  CLI::App* level = &app;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a == "-s" || a == "--socket") {
      ++i;  // its value
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;
    auto subs = level->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) break;  // an argument, not a command
    if (a == "help" && std::none_of(subs.begin(), subs.end(),
                                    [](CLI::App* sc) { return sc->get_name() == "help"; })) {
      args[i] = "--help";
      return "";
    }
    std::vector<CLI::App*> hits;
    for (auto* sc : subs) {
      if (sc->get_name() == a) {
        hits = {sc};
        break;
      }
      if (sc->get_name().rfind(a, 0) == 0) hits.push_back(sc);
    }
    std::string where = level == &app ? "" : level->get_name() + " ";
    if (hits.size() == 1) {
      args[i] = hits[0]->get_name();
      level = hits[0];
      continue;
    }
    std::string names;
    if (hits.size() > 1) {
      for (auto* sc : hits) names += (names.empty() ? "" : ", ") + where + sc->get_name();
      return fmt::format("\"{}{}\" is ambiguous: {}", where, a, names);
    }
    std::string nearest;
    size_t best = SIZE_MAX;
    for (auto* sc : subs) {
      names += (names.empty() ? "" : ", ") + sc->get_name();
      size_t dist = dp::edit_distance(a, sc->get_name());
      if (dist < best) best = dist, nearest = sc->get_name();
    }
    return fmt::format("no command \"{}{}\"{}; the commands{} are {}", where, a,
                       best <= 2 ? fmt::format(" (did you mean \"{}{}\"?)", where, nearest) : "",
                       where.empty() ? "" : " of " + level->get_name(), names);
  }
  // an object named without its command: its help, as for "help"
  if (level != &app && !level->get_subcommands([](CLI::App*) { return true; }).empty() &&
      std::none_of(args.begin(), args.end(),
                   [](const std::string& a) { return a == "-h" || a == "--help"; }))
    args.insert(args.begin() + static_cast<long>(std::min(i, args.size())), "--help");
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpctl - operate dualpathd (dualpath " + std::string(dp::kVersion) + ")"};
  app.name("dpctl");  // not the path it was run by
  app.require_subcommand(1);
  app.fallthrough();  // -j, -p and -s anywhere on the line, as ip(8) and bpftool take them
  Globals g;
  if (const char* s = std::getenv("DPCTL_SOCKET")) g.socket = s;
  app.add_flag("-j,--json", g.json_out, "JSON output, errors included");
  app.add_flag("-p,--pretty", g.pretty, "indented JSON (implies -j)");
  app.add_option("-s,--socket", g.socket, "dualpathd control socket (env DPCTL_SOCKET)")
      ->capture_default_str();
  app.set_version_flag("--version", std::string(dp::kVersion));

  std::function<int()> action;
  auto* status = app.add_subcommand("status", "daemon, policy and datapath summary");
  bool status_ready = false, status_all = false;
  status->add_flag("--ready", status_ready,
                   "exit 1 unless the daemon runs its policy file as it is on disk and a path "
                   "carries traffic (a readiness probe, a rollout's health gate)");
  status->add_flag("--all-paths", status_all, "with --ready: every path must carry traffic");
  status->callback([&] { action = [&] { return cmd_status(g, status_ready, status_all); }; });

  auto* path = app.add_subcommand("path", "the rails")->require_subcommand(1);
  path->add_subcommand("list", "every path with rate, utilisation and counters")->callback([&] {
    action = [&] { return cmd_path_list(g); };
  });
  std::string path_name;
  auto* show = path->add_subcommand("show", "one path in detail");
  show->add_option("PATH", path_name, "path name")->required();
  show->callback([&] { action = [&] { return cmd_path_show(g, path_name); }; });

  std::string drain_name;
  for (bool on : {true, false}) {
    auto* dr = path->add_subcommand(on ? "drain" : "undrain",
                                    on ? "move all traffic off a path for maintenance"
                                       : "give a drained path its traffic back, gradually");
    dr->add_option("PATH", drain_name, "path name")->required();
    dr->callback([&, on] { action = [&, on] { return cmd_path_drain(g, drain_name, on); }; });
  }

  auto* cls = app.add_subcommand("class", "the traffic classes")->require_subcommand(1);
  cls->add_subcommand("list", "classes with ports, mark, rail now and bytes")->callback([&] {
    action = [&] { return cmd_class_list(g); };
  });
  std::string class_name, class_path;
  auto* set = cls->add_subcommand("set", "pin a class to a path");
  set->add_option("CLASS", class_name, "class name")->required();
  set->add_option("PATH", class_path, "path name")->required();
  set->callback([&] { action = [&] { return cmd_class_set(g, class_name, class_path); }; });

  auto* flow = app.add_subcommand("flow", "the flow table")->require_subcommand(1);
  auto* flist =
      flow->add_subcommand("list", "the heaviest flows, with class, path, bytes, RTT, retransmits");
  size_t flow_top = 20;
  std::string flow_class, flow_path;
  flist->add_option("--top", flow_top, "how many flows")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  flist->add_option("--class", flow_class, "only flows of this class");
  flist->add_option("--path", flow_path, "only flows on this path");
  flist->callback([&] {
    action = [&] {
      json args{{"top", flow_top}};
      if (!flow_class.empty()) args["class"] = flow_class;
      if (!flow_path.empty()) args["path"] = flow_path;
      return cmd_flow_list(g, args);
    };
  });

  std::string run_class;
  std::vector<std::string> run_argv;
  auto* run = app.add_subcommand(
      "run", "run a command so that its sockets belong to a class (its cgroup is the class's)");
  run->add_option("--class", run_class, "class name")->required();
  run->add_option("COMMAND", run_argv, "the command and its arguments, after --")->required();
  run->callback([&] { action = [&] { return cmd_run(g, run_class, run_argv); }; });

  std::string env_class, env_format = "shell";
  auto* envc = app.add_subcommand(
      "env",
      "launch settings (NCCL_*, UCX_*) that put a framework's RDMA traffic on a class's rails");
  envc->add_option("--class", env_class, "class name")->required();
  envc->add_option("--format", env_format, "shell or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"shell", "json"}));
  envc->callback([&] { action = [&] { return cmd_env(g, env_class, env_format); }; });

  BudgetArgs budget;
  auto* bud = app.add_subcommand(
      "budget",
      "bandwidth a planned load needs on each rail, and the KV-cache size (against --policy "
      "FILE, or the running daemon's policy)");
  bud->add_option("FILE", budget.file, "a budget TOML ([[load]] sections, [kv])");
  bud->add_option("--policy", budget.policy, "the node's policy (default: the running one)");
  bud->add_option("--class", budget.klass, "the class of the load given by --rate");
  bud->add_option("--concurrency", budget.concurrency, "requests at once")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  bud->add_option("--rate", budget.rate, "per request: \"18MB/s\", \"2Gbit\"");
  bud->add_option("--amplification", budget.amplification, "sharding, replicas, protocol")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e6));
  bud->add_option("--headroom", budget.headroom, "multiply every demand by this (default 1)")
      ->check(CLI::Range(1.0, 1e6));
  bud->add_option("--kv", budget.kv,
                  "KV cache: LAYERS,KV_HEADS,HEAD_DIM,BYTES_PER_ELEMENT,TOKENS[,SEQUENCES]");
  bud->callback([&] { action = [&] { return cmd_budget(g, budget); }; });

  auto* unpin =
      cls->add_subcommand("unpin", "give a class pinned with `class set` back to the scheduler");
  std::string unpin_class;
  unpin->add_option("CLASS", unpin_class, "class name")->required();
  unpin->callback([&] { action = [&] { return cmd_class_unpin(g, unpin_class); }; });

  auto* events = app.add_subcommand("events", "the scheduler's decisions, with their reasons");
  bool follow = false;
  uint64_t since = 0;
  events->add_flag("-f,--follow", follow, "keep printing new events");
  events->add_option("--since", since, "only events after this number");
  events->callback([&] { action = [&] { return cmd_events(g, follow, since); }; });

  auto* pol = app.add_subcommand("policy", "policy files")->require_subcommand(1);
  std::string policy_file;
  auto* check = pol->add_subcommand(
      "check", "validate a policy file, or every node of a cluster description, offline");
  check->add_option("FILE", policy_file, "policy or cluster file, or - for standard input")
      ->required();
  check->callback([&] { action = [&] { return cmd_policy_check(g, policy_file); }; });
  pol->add_subcommand("reload", "make the daemon re-read its policy file (like SIGHUP)")
      ->callback([&] { action = [&] { return cmd_policy_reload(g); }; });
  pol->add_subcommand("show", "the running policy's text, and whether the file on disk differs")
      ->callback([&] { action = [&] { return cmd_policy_show(g); }; });
  std::vector<std::string> diff_files;
  auto* diff = pol->add_subcommand(
      "diff",
      "what FILE changes against the running policy, or NEW against OLD offline "
      "(exit 0 none, 1 some, 2 trouble)");
  diff->add_option("[OLD] FILE", diff_files, "policy file(s)")->required()->expected(1, 2);
  diff->callback([&] { action = [&] { return cmd_policy_diff(g, diff_files); }; });
  auto* apply = pol->add_subcommand(
      "apply", "check FILE, show its changes, install it as the daemon's policy and reload");
  apply->add_option("FILE", policy_file, "policy file")->required();
  apply->callback([&] { action = [&] { return cmd_policy_apply(g, policy_file); }; });
  pol->add_subcommand("rollback", "apply the policy the last apply replaced (POLICY.prev)")
      ->callback([&] { action = [&] { return cmd_policy_rollback(g); }; });
  std::string render_node, render_dir;
  auto* render = pol->add_subcommand(
      "render",
      "a node's policy from a cluster description (dualpath-cluster(5)), or every node's");
  render->add_option("CLUSTER", policy_file, "cluster description, or - for standard input")
      ->required();
  auto* rn = render->add_option("--node", render_node, "print this node's policy");
  auto* ra = render->add_option("--all", render_dir, "write every node's policy as DIR/NODE.toml")
                 ->type_name("DIR");
  rn->excludes(ra);
  render->callback([&] {
    if (render_node.empty() && render_dir.empty())
      throw CLI::ValidationError("render", "give --node NAME or --all DIR");
    action = [&] { return cmd_policy_render(g, policy_file, render_node, render_dir); };
  });

  ValidateArgs val;
  auto* valc = app.add_subcommand(
      "validate", "check this node before it takes traffic: go/no-go (exit 0 go, 1 no-go)");
  valc->add_option("--peer", val.peers, "a node running dualpathd to measure toward (repeat)");
  valc->add_option("--port", val.port, "the peers' responder port ([responder] port)")
      ->capture_default_str();
  valc->add_option("--duration", val.duration, "seconds per throughput test")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 30.0));
  valc->add_option("--streams", val.streams, "connections of the multi-stream tests")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  valc->add_option("--min-throughput", val.min_throughput,
                   "no-go below this fraction of a path's capacity (multi-stream)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  valc->callback([&] { action = [&] { return cmd_validate(g, val); }; });

  ProbeArgs prb;
  auto* prbc = app.add_subcommand(
      "probe", "TCP connect time, RTT percentiles and loss to PEER over each rail");
  prbc->add_option("PEER", prb.peer, "a node running dualpathd")->required();
  prbc->add_option("--class", prb.klass, "also show which rails this class uses now");
  prbc->add_option("--count", prb.count, "connects and round trips per rail")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  prbc->add_option("--port", prb.port, "the peer's responder port")->capture_default_str();
  prbc->callback([&] { action = [&] { return cmd_probe(g, prb); }; });

  DiagnoseArgs dia;
  auto* diac = app.add_subcommand(
      "diagnose",
      "the path, a common upstream, or inside the node? (live figures, optional probes)");
  diac->add_option("--peer", dia.peers, "also probe this node over each rail (repeat)");
  diac->add_option("--class", dia.klass, "look only at this class's connections");
  diac->add_option("--seconds", dia.seconds, "how long to watch sockets and CPUs")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 60.0));
  diac->add_option("--port", dia.port, "the peers' responder port")->capture_default_str();
  diac->callback([&] { action = [&] { return cmd_diagnose(g, dia); }; });

  std::vector<std::string> args(argv + 1, argv + argc);
  if (std::string err = expand_commands(app, args); !err.empty()) {
    bool json_mode = std::any_of(args.begin(), args.end(), [](const std::string& a) {
      return a == "-j" || a == "--json" || a == "-p" || a == "--pretty";
    });
    if (json_mode)
      std::cout << json{{"error", err}}.dump() << "\n";
    else
      std::cerr << "dpctl: " << err << "\n";
    return kExitUsage;
  }
  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes them reversed
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    bool json_mode = false;
    for (int i = 1; i < argc; ++i)
      json_mode |= std::string(argv[i]) == "-j" || std::string(argv[i]) == "--json" ||
                   std::string(argv[i]) == "-p" || std::string(argv[i]) == "--pretty";
    if (json_mode) {
      std::cout << json{{"error", e.what()}}.dump() << "\n";
      return 2;
    }
    app.exit(e);
    return kExitUsage;  // as dpctl(8) says (CLI11's own codes vary)
  }
  if (g.pretty) g.json_out = true;
  return action ? action() : 2;
}

// SPDX-License-Identifier: Apache-2.0
// dpctl path list | show PATH | drain PATH | undrain PATH
#include <iostream>

#include "dpctl.h"
#include "dualpath/core/units.h"

namespace dpctl {

namespace {

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
    // (an older daemon's reply has no such field)
    if (const json d = h.value("evidence_discounted", json()); d.is_object())
      std::cout << "  evidence    RTOs not taken for a failure: " << d["congested"]
                << " ticks busy and still acknowledged, " << d["peer_queue"]
                << " with the inbound at line rate\n";
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

int cmd_path_show(const Globals& g, const std::string& name) {
  int rc;
  auto d = request(g, "path.show", {{"path", name}}, &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  print_path_detail(*d);
  return 0;
}

}  // namespace

void add_path(CLI::App& app, const Globals& g, Action& action) {
  auto name = std::make_shared<std::string>();
  auto* path = app.add_subcommand("path", "the rails")->require_subcommand(1);
  path->add_subcommand("list", "every path with rate, utilisation and counters")
      ->callback([&g, &action] { action = [&g] { return cmd_path_list(g); }; });
  auto* show = path->add_subcommand("show", "one path in detail");
  show->add_option(kPath, *name, "path name")->required();
  show->callback([&g, &action, name] { action = [&g, name] { return cmd_path_show(g, *name); }; });
  for (bool on : {true, false}) {
    auto* dr = path->add_subcommand(on ? "drain" : "undrain",
                                    on ? "move all traffic off a path for maintenance"
                                       : "give a drained path its traffic back, gradually");
    dr->add_option(kPath, *name, "path name")->required();
    dr->callback([&g, &action, name, on] {
      action = [&g, name, on] { return cmd_path_drain(g, *name, on); };
    });
  }
}

}  // namespace dpctl

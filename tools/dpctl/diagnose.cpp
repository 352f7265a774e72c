// SPDX-License-Identifier: Apache-2.0
// dpctl validate, probe and diagnose: what an operator runs before a node
// takes traffic and when something is slow (dpctl(8), "DIAGNOSTICS").
//
// They run here, in dpctl, not in the daemon: a throughput test takes
// seconds and the daemon's loop must keep BFD and the tick on time. The
// daemon gives the policy (policy.show), its checks of the node
// (node.check) and its live figures; the measurements toward a peer go to
// that peer's responder, over each rail (the rail's source address and
// fwmark, which the policy's own rule routes over the rail and the
// classifier never steers).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "dpctl.h"
#include "dualpath/client/probe.h"
#include "dualpath/client/sock_diag.h"
#include "dualpath/core/policy.h"

namespace dpctl {

namespace {

using std::chrono::milliseconds;
namespace probe = dp::probe;

// The running policy, parsed here (dpctl classifies sockets with it).
std::optional<dp::Policy> running_policy(const Globals& g, int* rc) {
  auto d = request(g, "policy.show", json::object(), rc);
  if (!d) return std::nullopt;
  auto load = dp::parse_policy((*d)["text"].get<std::string>(), str((*d)["file"]));
  if (!load.ok()) {
    *rc = fail(g, "the running policy does not parse here (dpctl older than dualpathd?)");
    return std::nullopt;
  }
  return *load.policy;
}

std::optional<dp::IpAddr> parse_peer(const Globals& g, const std::string& text, int* rc) {
  auto a = dp::IpAddr::parse(text);
  if (!a) *rc = fail(g, fmt::format("'{}' is not an IP address", text)) + 1;  // usage
  return a;
}

// Every --peer as an address, or nullopt (*rc set) at the first that is not.
std::optional<std::vector<dp::IpAddr>> parse_peers(const Globals& g,
                                                   const std::vector<std::string>& texts, int* rc) {
  std::vector<dp::IpAddr> out;
  for (const auto& t : texts) {
    auto addr = parse_peer(g, t, rc);
    if (!addr) return std::nullopt;
    out.push_back(*addr);
  }
  return out;
}

// One rail toward a peer: where its probes go, or why they cannot.
struct PeerRail {
  size_t path = 0;  // local path index
  probe::Target target;
  std::string peer_path;
  int peer_mtu = 0;
  std::string error;
};

struct Peer {
  std::string addr;
  json hello;         // the peer's answer, null if none
  std::string error;  // why there is none
  std::vector<PeerRail> rails;
};

// Asks the peer for its rails (routed as usual, then over each rail in turn)
// and pairs them with ours: by name, else by position.
Peer discover(const dp::Policy& p, const dp::IpAddr& addr, uint16_t port) {
  Peer peer;
  peer.addr = addr.str();
  // Routed as usual to the first rail's port, then over each rail to its
  // port (in the separate topology the address is on one rail's network,
  // whose responder port is port + that rail's index).
  std::vector<probe::Target> tries{{addr, port, std::nullopt, 0}};
  for (size_t i = 0; i < p.paths.size(); ++i) {
    const auto& ps = p.paths[i];
    auto src = addr.family == AF_INET ? ps.source : ps.source6;
    tries.push_back({addr, static_cast<uint16_t>(port + i), std::nullopt, 0});
    tries.push_back({addr, static_cast<uint16_t>(port + i), src, ps.fwmark});
  }
  for (const auto& t : tries) {
    auto h = probe::hello(t, milliseconds(1500));
    if (h) {
      peer.hello = *h;
      break;
    }
    if (peer.error.empty()) peer.error = h.error().what();
  }
  for (size_t i = 0; i < p.paths.size(); ++i) {
    const auto& ps = p.paths[i];
    PeerRail r;
    r.path = i;
    r.target.addr = addr;
    r.target.port = static_cast<uint16_t>(port + i);
    r.target.source = addr.family == AF_INET ? ps.source : ps.source6;
    r.target.mark = ps.fwmark;
    if (!r.target.source)
      r.error = fmt::format("{} has no {} source address", ps.name,
                            addr.family == AF_INET ? "IPv4" : "IPv6");
    if (!peer.hello.is_object() && p.topology == dp::Topology::Separate && r.error.empty())
      r.error = "the peer's responder did not answer, so its address on this rail is unknown";
    if (peer.hello.is_object()) {
      const json& paths = peer.hello["paths"];
      const json* match = nullptr;
      for (const auto& pp : paths)
        if (pp["name"] == ps.name) match = &pp;
      if (!match && i < paths.size()) match = &paths[i];
      if (!match) {
        r.error = fmt::format("the peer has no rail to pair with {}", ps.name);
      } else {
        r.peer_path = (*match)["name"];
        r.peer_mtu = (*match).value("mtu", 0);
        r.target.port = static_cast<uint16_t>((*match)["port"].get<int>());
        // Separate topology: the peer's address on this rail's network.
        if (p.topology == dp::Topology::Separate) {
          const json& a = (*match)[addr.family == AF_INET ? "source" : "source6"];
          auto pa = a.is_string() ? dp::IpAddr::parse(a.get<std::string>()) : std::nullopt;
          if (pa)
            r.target.addr = *pa;
          else
            r.error = fmt::format("the peer has no {} address on its rail {}",
                                  addr.family == AF_INET ? "IPv4" : "IPv6", r.peer_path);
        }
      }
    }
    peer.rails.push_back(r);
  }
  return peer;
}

std::string fmt_bps(double bps) {
  if (bps >= 1e9) return fmt::format("{:.2f} Gbit/s", bps / 1e9);
  if (bps >= 1e6) return fmt::format("{:.0f} Mbit/s", bps / 1e6);
  return fmt::format("{:.0f} kbit/s", bps / 1e3);
}

std::string triple(const probe::Percentiles& p, const char* unit, int digits) {
  if (!p.n) return "-";
  return fmt::format("{:.{}f}/{:.{}f}/{:.{}f} {}", p.p50, digits, p.p95, digits, p.p99, digits,
                     unit);
}

// A number inside an object that may be null (no samples yet): 0 then.
double num(const json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0;
}

struct Row {
  std::string path, check;
  bool ok = true;
  std::string detail;
};

json rows_json(const std::vector<Row>& rows) {
  json out = json::array();
  for (const auto& r : rows)
    out.push_back({{"path", r.path}, {"check", r.check}, {"ok", r.ok}, {"detail", r.detail}});
  return out;
}

}  // namespace

// ------------------------------------------------------------------ validate

int cmd_validate(const Globals& g, const ValidateArgs& a) {
  int rc = 0;
  auto pol = running_policy(g, &rc);
  if (!pol) return rc;
  auto peers = parse_peers(g, a.peers, &rc);
  if (!peers) return rc;
  auto node = request(g, "node.check", json::object(), &rc);
  if (!node) return rc;
  std::vector<Row> rows;
  for (const auto& c : (*node)["checks"])
    rows.push_back({c["path"], c["check"], c["ok"], c["detail"]});
  const json& resp = (*node)["responder"];
  if (!resp["enabled"].get<bool>())
    rows.push_back({"-", "responder", true,
                    "disabled by the policy: other nodes cannot validate toward this one"});
  else
    rows.push_back({"-", "responder", !resp["listening"].empty(),
                    resp["listening"].empty()
                        ? "not listening: " + str(resp["errors"])
                        : fmt::format("listening on {}", fmt::join(resp["listening"], ", "))});

  std::map<std::string, bool> path_usable;
  for (const auto& c : (*node)["checks"])
    if (c["check"] == "health") path_usable[c["path"]] = c["ok"];
  std::map<std::string, int> local_mtu;
  for (const auto& m : (*node)["mtu"].items()) local_mtu[m.key()] = m.value();

  json peers_json = json::array();
  for (const auto& addr : *peers) {
    Peer peer = discover(*pol, addr, a.port);
    std::string who = "peer " + peer.addr;
    json pj = {{"peer", peer.addr}, {"node", nullptr}, {"rails", json::array()}};
    if (!peer.hello.is_object()) {
      rows.push_back({"-", who, false,
                      fmt::format("no answer from its responder on port {} over any rail ({}): "
                                  "is dualpathd running there with [responder] enabled, and "
                                  "does its policy route to us?",
                                  a.port, peer.error)});
      pj["error"] = peer.error;
    } else {
      pj["node"] = peer.hello["node"];
      if (peer.hello["topology"] != dp::to_string(pol->topology))
        rows.push_back({"-", who, false,
                        fmt::format("its topology is {}, ours {}", str(peer.hello["topology"]),
                                    dp::to_string(pol->topology))});
    }
    for (const auto& r : peer.rails) {
      const auto& ps = pol->paths[r.path];
      json rj = {
          {"path", ps.name}, {"peer_path", r.peer_path}, {"target", probe::to_string(r.target)}};
      if (!r.error.empty()) {
        rows.push_back({ps.name, who, false, r.error});
        rj["error"] = r.error;
        pj["rails"].push_back(rj);
        continue;
      }
      if (!peer.hello.is_object()) continue;
      // A failed path's fwmark is routed over a survivor: its probes would
      // measure the survivor, so they are not run.
      if (!path_usable[ps.name]) {
        rows.push_back({ps.name, who, false,
                        fmt::format("not measured: {} is failed over (health above), so its "
                                    "fwmark is routed over another rail",
                                    ps.name)});
        rj["error"] = "failed over";
        pj["rails"].push_back(rj);
        continue;
      }
      // MTU: the same on both ends, or large packets are lost one way.
      int mine = local_mtu[ps.name];
      rj["mtu"] = {{"local", mine}, {"peer", r.peer_mtu}};
      rows.push_back({ps.name, who + " mtu", mine == r.peer_mtu,
                      mine == r.peer_mtu
                          ? fmt::format("{} on both ends", mine)
                          : fmt::format("{} here, {} on {}'s {}: set the same MTU on both ends "
                                        "(and the switch ports between)",
                                        mine, r.peer_mtu, str(peer.hello["node"]), r.peer_path)});
      auto cs = probe::connects(r.target, 10, milliseconds(1000));
      auto cp = probe::percentiles(cs.ms);
      rj["connect_ms"] = probe::to_json(cp);
      rj["connect_lost"] = cs.lost;
      rj["connect_refused"] = cs.refused;
      bool reach = cs.lost == 0 && cs.refused == 0;
      rows.push_back(
          {ps.name, who + " connect", reach,
           reach ? fmt::format("10 of 10, p50 {:.2f} ms, p95 {:.2f} ms", cp.p50, cp.p95)
                 : fmt::format(
                       "{} of 10 connected to {} ({} no answer, {} refused: {}){}", cs.ms.size(),
                       probe::to_string(r.target), cs.lost, cs.refused, cs.error,
                       cs.lost ? ": packets are lost on this rail's path, one way or both" : "")});
      if (!reach) {
        pj["rails"].push_back(rj);
        continue;
      }
      auto e = probe::echo(r.target, 50, 64, milliseconds(2));
      if (!e) {
        rows.push_back({ps.name, who + " rtt", false, e.error().what()});
      } else {
        auto rp = probe::percentiles(e->us);
        rj["rtt_us"] = probe::to_json(rp);
        rows.push_back(
            {ps.name, who + " rtt", true,
             fmt::format("p50 {:.0f} us, p95 {:.0f} us over 50 round trips", rp.p50, rp.p95)});
      }
      json tp = json::object();
      std::string detail;
      bool tp_ok = true;
      double want = a.min_throughput * static_cast<double>(ps.capacity_bps);
      for (bool up : {true, false}) {
        for (int streams : {1, a.streams}) {
          auto key = fmt::format("{}_{}", up ? "out" : "in", streams);
          auto t = probe::throughput(r.target, up, streams, a.duration);
          if (!t) {
            tp[key] = nullptr;
            tp_ok = false;
            detail += fmt::format("{}{} x{}: {}", detail.empty() ? "" : ", ", up ? "out" : "in",
                                  streams, t.error().what());
            continue;
          }
          tp[key] = *t;
          detail += fmt::format("{}{} x{} {}", detail.empty() ? "" : ", ", up ? "out" : "in",
                                streams, fmt_bps(*t));
          if (streams == a.streams && *t < want) tp_ok = false;
        }
      }
      rj["throughput_bps"] = tp;
      if (!tp_ok)
        detail += fmt::format(": below {:.0f}% of the capacity {} with {} streams",
                              a.min_throughput * 100, fmt_bps(static_cast<double>(ps.capacity_bps)),
                              a.streams);
      rows.push_back({ps.name, who + " throughput", tp_ok, detail});
      pj["rails"].push_back(rj);
    }
    peers_json.push_back(pj);
  }

  size_t bad =
      static_cast<size_t>(std::count_if(rows.begin(), rows.end(), [](auto& r) { return !r.ok; }));
  if (g.json_out) {
    print_json(g, {{"node", (*node)["node"]},
                   {"topology", (*node)["topology"]},
                   {"go", bad == 0},
                   {"checks", rows_json(rows)},
                   {"peers", peers_json}});
  } else {
    std::vector<std::vector<std::string>> table;
    for (const auto& r : rows) table.push_back({r.path, r.check, r.ok ? "ok" : "NO", r.detail});
    std::cout << fmt::format("node {} ({} topology)\n", str((*node)["node"]),
                             str((*node)["topology"]));
    print_table({"PATH", "CHECK", "RESULT", "DETAIL"}, table);
    std::cout << (bad ? fmt::format("\nNO-GO: {} check{} failed\n", bad, bad == 1 ? "" : "s")
                      : "\nGO: every check passed\n");
  }
  return bad ? kExitRefused : 0;
}

// --------------------------------------------------------------------- probe

namespace {

struct RailProbe {
  probe::ConnectStats connect;
  std::optional<probe::EchoStats> echo;
  std::string error;
};

RailProbe probe_rail(const PeerRail& r, int count) {
  RailProbe out;
  if (!r.error.empty()) {
    out.error = r.error;
    return out;
  }
  out.connect = probe::connects(r.target, count, milliseconds(1000));
  if (out.connect.ms.empty()) {
    out.error = out.connect.error;
    return out;
  }
  auto e = probe::echo(r.target, count, 64, milliseconds(5));
  if (e)
    out.echo = *e;
  else
    out.error = e.error().what();
  return out;
}

double loss_of(const RailProbe& p) {
  size_t n = p.connect.ms.size() + static_cast<size_t>(p.connect.lost + p.connect.refused);
  return n ? static_cast<double>(p.connect.lost) / static_cast<double>(n) : 0;
}

}  // namespace

int cmd_probe(const Globals& g, const ProbeArgs& a) {
  int rc = 0;
  auto pol = running_policy(g, &rc);
  if (!pol) return rc;
  auto addr = parse_peer(g, a.peer, &rc);
  if (!addr) return rc;
  if (a.count < 1 || a.count > 10000) return fail(g, "--count is 1 to 10000") + 1;
  json klass = nullptr;
  if (!a.klass.empty()) {
    auto classes = request(g, "class.list", json::object(), &rc);
    if (!classes) return rc;
    for (const auto& c : *classes)
      if (c["name"] == a.klass) klass = c;
    if (klass.is_null())
      return fail(g, fmt::format("no class '{}' in the running policy", a.klass));
  }
  Peer peer = discover(*pol, *addr, a.port);
  // Passive figures: the flows to this peer (any of its addresses) in the flow table.
  std::vector<std::string> peer_addrs{peer.addr};
  if (peer.hello.is_object())
    for (const auto& pp : peer.hello["paths"])
      for (const char* k : {"source", "source6"})
        if (pp[k].is_string()) peer_addrs.push_back(pp[k]);
  auto flows = request(g, "flow.list", {{"top", 65536}}, &rc);
  if (!flows) return rc;

  json out = {{"peer", peer.addr},
              {"node", peer.hello.is_object() ? peer.hello["node"] : json()},
              {"count", a.count},
              {"rails", json::array()}};
  if (!peer.hello.is_object()) out["error"] = peer.error;
  std::vector<std::vector<std::string>> table, passive;
  for (const auto& r : peer.rails) {
    const auto& ps = pol->paths[r.path];
    RailProbe p = probe_rail(r, a.count);
    auto cp = probe::percentiles(p.connect.ms);
    probe::Percentiles rp;
    if (p.echo) rp = probe::percentiles(p.echo->us);
    std::string use = "-";
    if (klass.is_object()) {
      double share = klass["shares"].value(ps.name, 0.0);  // percent
      if (share > 0) use = fmt::format("{} {:.0f}%", a.klass, share);
    }
    json rj = {{"path", ps.name},
               {"target", probe::to_string(r.target)},
               {"connect_ms", probe::to_json(cp)},
               {"connect_lost", p.connect.lost},
               {"loss", loss_of(p)},
               {"rtt_us", probe::to_json(rp)},
               {"retransmits", p.echo ? json(p.echo->retransmits) : json()},
               {"class_share", use == "-" ? json() : json(use)},
               {"error", p.error.empty() ? json() : json(p.error)}};
    // passive: sockops srtt of this peer's flows on this path
    std::vector<double> srtt;
    uint64_t retrans = 0;
    for (const auto& f : (*flows)["flows"]) {
      if (f["path"] != ps.name || f["proto"] != "tcp") continue;
      if (std::find(peer_addrs.begin(), peer_addrs.end(), f["dst"].get<std::string>()) ==
              peer_addrs.end() &&
          std::find(peer_addrs.begin(), peer_addrs.end(), f["src"].get<std::string>()) ==
              peer_addrs.end())
        continue;
      if (f["srtt_us"].get<double>() > 0) srtt.push_back(f["srtt_us"]);
      retrans += f["retrans_segs"].get<uint64_t>();
    }
    auto sp = probe::percentiles(srtt);
    rj["passive"] = {
        {"flows", srtt.size()}, {"srtt_us", probe::to_json(sp)}, {"retrans_segs", retrans}};
    out["rails"].push_back(rj);
    table.push_back({ps.name, probe::to_string(r.target), triple(cp, "ms", 2),
                     fmt::format("{:.0f}%", loss_of(p) * 100), triple(rp, "us", 0),
                     p.echo ? std::to_string(p.echo->retransmits) : "-", use,
                     p.error.empty() ? "" : p.error});
    passive.push_back(
        {ps.name, std::to_string(srtt.size()), triple(sp, "us", 0), std::to_string(retrans)});
  }
  if (g.json_out) return print_json(g, out), 0;
  std::cout << fmt::format(
      "probe {} ({}), {} connects and {} round trips of 64 bytes per rail\n", peer.addr,
      peer.hello.is_object() ? "node " + str(peer.hello["node"]) : "no answer: " + peer.error,
      a.count, a.count);
  print_table(
      {"PATH", "TARGET", "CONNECT p50/95/99", "LOSS", "RTT p50/95/99", "RETRANS", "CLASS", "ERROR"},
      table);
  std::cout << "\npassive (sockops smoothed RTT of live TCP flows to this peer):\n";
  print_table({"PATH", "FLOWS", "SRTT p50/95/99", "RETRANS"}, passive);
  return 0;
}

// ------------------------------------------------------------------ diagnose

namespace {

// Busy fraction per CPU over `seconds` (/proc/stat: everything but idle and iowait).
std::vector<double> cpu_busy(double seconds) {
  auto read = [] {
    std::vector<std::pair<uint64_t, uint64_t>> out;  // busy, total
    std::ifstream in("/proc/stat");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(line[3])) continue;
      std::istringstream ss(line.substr(line.find(' ')));
      uint64_t v, total = 0, idle = 0;
      for (int i = 0; ss >> v; ++i) {
        total += v;
        if (i == 3 || i == 4) idle += v;
      }
      out.push_back({total - idle, total});
    }
    return out;
  };
  auto a = read();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  auto b = read();
  std::vector<double> out;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double t = static_cast<double>(b[i].second - a[i].second);
    out.push_back(t > 0 ? static_cast<double>(b[i].first - a[i].first) / t : 0);
  }
  return out;
}

struct ClassSockets {
  int sockets = 0;
  uint64_t busy = 0, rwnd = 0, sndbuf = 0;  // microseconds over the window
  uint64_t bytes = 0, retrans = 0;
  uint64_t rqueue = 0;  // unread now
  int rqueue_sockets = 0;
  std::vector<std::string> peers;
};

}  // namespace

int cmd_diagnose(const Globals& g, const DiagnoseArgs& a) {
  int rc = 0;
  auto pol = running_policy(g, &rc);
  if (!pol) return rc;
  auto peers = parse_peers(g, a.peers, &rc);
  if (!peers) return rc;
  if (!a.klass.empty() && pol->class_index(a.klass) < 0)
    return fail(g, fmt::format("no class '{}' in the running policy", a.klass));
  if (a.seconds <= 0 || a.seconds > 60) return fail(g, "--seconds is above 0 and at most 60") + 1;

  // Sockets and CPUs over the window; the daemon's figures at its end.
  auto before = dp::tcp_sockets();
  if (!before) return fail(g, "reading the node's TCP sockets failed: " + before.error().what());
  auto cpus = cpu_busy(a.seconds);
  auto after = dp::tcp_sockets();
  if (!after) return fail(g, "reading the node's TCP sockets failed: " + after.error().what());
  auto paths = request(g, "path.list", json::object(), &rc);
  if (!paths) return rc;
  auto events = request(g, "events", {{"since", 0}}, &rc);
  if (!events) return rc;

  // --- the rails
  struct RailView {
    std::string name;
    bool bad = false, usable = true;
    std::vector<std::string> evidence;
  };
  std::vector<RailView> rails;
  for (const auto& p : *paths) {
    RailView r{p["name"], false, true, {}};
    const json& h = p["health"];
    std::string state = h["state"];
    r.usable = state == "up" || state == "ramping";
    // down or suspect: a fault now; holddown, ramping or drained: not now
    if (state == "down" || state == "suspect") r.bad = true;
    if (state != "up")
      r.evidence.push_back(fmt::format("health {} for {:.0f} s ({})", state,
                                       h["seconds"].get<double>(), str(h["reason"])));
    if (h["bfd"].is_object() && h["bfd"]["state"] != "up") {
      r.bad = true;
      r.evidence.push_back(fmt::format("BFD to {} {} (diag {})", str(h["bfd"]["peer"]),
                                       str(h["bfd"]["state"]), str(h["bfd"]["diag"])));
    }
    const json& m = p["measure"];
    if (m.is_object()) {
      double loss = num(m["loss"], "ratio");
      if (loss >= 0.01) {
        r.bad = true;
        r.evidence.push_back(fmt::format("TCP retransmitted {:.1f}% of segments over {:.0f} s",
                                         loss * 100, num(m["loss"], "window_s")));
      }
      if (m["link"].is_object() && !m["link"].value("oper_up", true)) {
        r.bad = true;
        r.evidence.push_back("link down");
      }
      if (!r.bad)
        r.evidence.push_back(
            fmt::format("RTT p50/p95 {:.0f}/{:.0f} us, retransmitted {:.2f}%, utilisation {:.0f}%",
                        num(m["rtt"], "p50_us"), num(m["rtt"], "p95_us"), loss * 100,
                        num(m, "utilisation") * 100));
    }
    rails.push_back(r);
  }
  // Probes toward each peer, when asked: a rail that cannot reach one is bad.
  json probes = json::array();
  for (const auto& addr : *peers) {
    Peer peer = discover(*pol, addr, a.port);
    for (const auto& pr : peer.rails) {
      auto& r = rails[pr.path];
      if (!r.usable) {  // its fwmark is routed over another rail now
        r.evidence.push_back(fmt::format("not probed: failed over to another rail"));
        continue;
      }
      RailProbe p = probe_rail(pr, 5);
      json pj = {{"peer", peer.addr}, {"path", r.name}, {"loss", loss_of(p)}};
      if (!p.error.empty() || p.connect.lost) {
        r.bad = true;
        r.evidence.push_back(fmt::format("probe to {}: {} of 5 connects unanswered{}", peer.addr,
                                         p.connect.lost,
                                         p.error.empty() ? "" : " (" + p.error + ")"));
        pj["error"] = p.error;
      } else if (p.echo) {
        auto rp = probe::percentiles(p.echo->us);
        r.evidence.push_back(fmt::format("probe to {}: RTT p50 {:.0f} us", peer.addr, rp.p50));
        pj["rtt_us"] = probe::to_json(rp);
      }
      probes.push_back(pj);
    }
  }

  // --- the node: TCP sockets by class, over the window
  std::map<uint64_t, const dp::TcpSocketInfo*> was;
  for (const auto& s : *before) was[s.cookie] = &s;
  std::map<int, ClassSockets> by_class;
  for (const auto& s : *after) {
    if (s.state != 1) continue;  // TCP_ESTABLISHED
    int k = pol->classify(dp::Proto::Tcp, s.sport, s.dport, s.mark);
    if (k < 0) continue;
    auto& c = by_class[k];
    ++c.sockets;
    c.rqueue += s.rqueue;
    if (s.rqueue >= 64 * 1024) ++c.rqueue_sockets;
    auto it = was.find(s.cookie);
    if (it == was.end()) continue;
    const auto& b = *it->second;
    c.busy += s.busy_us - b.busy_us;
    c.rwnd += s.rwnd_limited_us - b.rwnd_limited_us;
    c.sndbuf += s.sndbuf_limited_us - b.sndbuf_limited_us;
    c.bytes += s.bytes_acked - b.bytes_acked;
    c.retrans += s.total_retrans - b.total_retrans;
    if (s.rwnd_limited_us > b.rwnd_limited_us &&
        std::find(c.peers.begin(), c.peers.end(), s.dst.str()) == c.peers.end())
      c.peers.push_back(s.dst.str());
  }
  double busiest = cpus.empty() ? 0 : *std::max_element(cpus.begin(), cpus.end());
  double mean = 0;
  for (double c : cpus) mean += c / static_cast<double>(cpus.size());

  // --- the decision chain of article 000
  json conclusion;
  std::vector<std::string> evidence, next;
  size_t bad =
      static_cast<size_t>(std::count_if(rails.begin(), rails.end(), [](auto& r) { return r.bad; }));
  std::string peer_hint = a.peers.empty() ? "PEER" : a.peers.front();
  if (bad == rails.size() && bad > 0) {
    conclusion = {{"kind", "upstream"},
                  {"summary",
                   "every rail is bad: look at what they share (the peer nodes, a "
                   "common switch or spine, this node's NICs and driver), not at one "
                   "path"}};
    for (const auto& r : rails)
      for (const auto& e : r.evidence) evidence.push_back(r.name + ": " + e);
    next = {fmt::format("dpctl validate --peer {} (and toward another node: one peer or all?)",
                        peer_hint),
            "dpctl events (when did each rail go)",
            "ip -s link; ethtool -S <rail> (errors, drops)"};
  } else if (bad > 0) {
    std::string names, good;
    for (const auto& r : rails) {
      (r.bad ? names : good) +=
          fmt::format("{}{}", ((r.bad ? names : good).empty() ? "" : ", "), r.name);
      for (const auto& e : r.evidence) evidence.push_back(r.name + ": " + e);
    }
    // What the scheduler did about it: the newest events naming a bad rail.
    std::vector<std::string> did;
    const json& ev = (*events)["events"];
    for (auto it = ev.rbegin(); it != ev.rend() && did.size() < 3; ++it) {
      std::string path = (*it)["path"].is_string() ? (*it)["path"].get<std::string>() : "";
      bool names_bad = false;
      for (const auto& r : rails) names_bad = names_bad || (r.bad && path == r.name);
      if (names_bad)
        did.push_back(fmt::format("{} {} {}: {}", str((*it)["time"]), str((*it)["kind"]), path,
                                  str((*it)["reason"])));
    }
    for (const auto& d : did) evidence.push_back("dualpath: " + d);
    conclusion = {{"kind", "path"},
                  {"path", names},
                  {"summary", fmt::format("the path of {} is at fault and {} is fine: the NIC, "
                                          "cable, switch port or fabric of {}",
                                          names, good, names)},
                  {"scheduler", did}};
    next = {fmt::format("dpctl probe {}", peer_hint),
            fmt::format("dpctl path show {}", rails[0].bad ? rails[0].name : names), "dpctl events",
            fmt::format("ethtool -S {} ; ip -s link show {}", names, names)};
  } else {
    for (const auto& r : rails)
      for (const auto& e : r.evidence) evidence.push_back(r.name + ": " + e);
    std::vector<std::string> inside;
    if (busiest >= 0.9)
      inside.push_back(fmt::format("CPU: busiest {:.0f}%, mean {:.0f}% over {:.0f} s",
                                   busiest * 100, mean * 100, a.seconds));
    for (const auto& [k, c] : by_class) {
      const auto& name = pol->classes[static_cast<size_t>(k)].name;
      if (!a.klass.empty() && name != a.klass) continue;
      double rwnd = c.busy ? static_cast<double>(c.rwnd) / static_cast<double>(c.busy) : 0;
      double sndbuf = c.busy ? static_cast<double>(c.sndbuf) / static_cast<double>(c.busy) : 0;
      if (c.busy && rwnd >= 0.5)
        inside.push_back(fmt::format(
            "class {}: its {} connection{} to {} waited for the receiver's window {:.0f}% of "
            "their sending time: the receiving application (or its CPU) does not read fast enough",
            name, c.sockets, c.sockets == 1 ? "" : "s", fmt::join(c.peers, ", "), rwnd * 100));
      if (c.busy && sndbuf >= 0.5)
        inside.push_back(
            fmt::format("class {}: send-buffer-limited {:.0f}% of its sending time: "
                        "the sending application writes too little at a time",
                        name, sndbuf * 100));
      if (c.rqueue_sockets)
        inside.push_back(
            fmt::format("class {}: {} bytes received and not read by the application "
                        "on {} socket{} of this node",
                        name, c.rqueue, c.rqueue_sockets, c.rqueue_sockets == 1 ? "" : "s"));
      if (c.retrans && c.bytes)
        inside.push_back(
            fmt::format("class {}: {} segments retransmitted while the rails are "
                        "clean: queueing on the host (tc -s qdisc)",
                        name, c.retrans));
    }
    if (!inside.empty()) {
      conclusion = {{"kind", "node"},
                    {"summary",
                     "the rails are fine; the bottleneck is inside a node (CPU, "
                     "host queueing or the application)"}};
      evidence.insert(evidence.begin(), inside.begin(), inside.end());
      next = {"ss -tnip (Recv-Q, Send-Q, rwnd_limited per connection)",
              "mpstat -P ALL 1 / top (CPU and softirq of the receiving and sending processes)",
              "tc -s qdisc show (drops and backlog on the rails)"};
    } else {
      conclusion = {{"kind", "none"},
                    {"summary",
                     "no fault found: the rails are healthy and no class's connections "
                     "waited on either end"}};
      evidence.push_back(
          fmt::format("CPU: busiest {:.0f}%, mean {:.0f}%", busiest * 100, mean * 100));
      next = {fmt::format("dpctl probe {} --count 200 (tail latency)", peer_hint),
              "dpctl budget (is the planned load above what the rails carry?)"};
    }
  }
  conclusion["evidence"] = evidence;
  conclusion["next"] = next;

  if (g.json_out) {
    json classes = json::object();
    for (const auto& [k, c] : by_class)
      classes[pol->classes[static_cast<size_t>(k)].name] = {
          {"sockets", c.sockets},      {"busy_us", c.busy},
          {"rwnd_limited_us", c.rwnd}, {"sndbuf_limited_us", c.sndbuf},
          {"bytes_acked", c.bytes},    {"retrans", c.retrans},
          {"rqueue", c.rqueue}};
    json rj = json::array();
    for (const auto& r : rails)
      rj.push_back({{"path", r.name}, {"bad", r.bad}, {"evidence", r.evidence}});
    print_json(g, {{"conclusion", conclusion},
                   {"rails", rj},
                   {"probes", probes},
                   {"classes", classes},
                   {"cpu_busy", cpus},
                   {"seconds", a.seconds}});
    return 0;
  }
  std::cout << "conclusion: " << str(conclusion["kind"]) << ": " << str(conclusion["summary"])
            << "\n"
            << "evidence:\n";
  for (const auto& e : evidence) std::cout << "  - " << e << "\n";
  std::cout << "next:\n";
  for (const auto& n : next) std::cout << "  $ " << n << "\n";
  return 0;
}

}  // namespace dpctl

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
#include "dualpath/core/diagnose.h"
#include "dualpath/core/policy.h"
#include "dualpath/kernel/procfs.h"
#include "dualpath/kernel/sock_diag.h"

namespace dpctl {

namespace {

struct ValidateArgs {
  std::vector<std::string> peers;
  uint16_t port = dp::kResponderPort;
  double duration = 1;  // seconds per throughput test
  int streams = 4;
  double min_throughput = 0.5;  // of the path's capacity, multi-stream
};
struct ProbeArgs {
  std::string peer, klass;
  uint16_t port = dp::kResponderPort;
  int count = 20;
};
struct DiagnoseArgs {
  std::vector<std::string> peers;
  std::string klass;
  uint16_t port = dp::kResponderPort;
  double seconds = 2;  // how long sockets and CPUs are watched
};

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
  uint16_t mptcp_port = 0;  // the peer's responder's MPTCP port on the rail (0: none)
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
        r.mptcp_port = static_cast<uint16_t>((*match).value("mptcp_port", 0));
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

  const bool multipath = pol->has_multipath();
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
      if (multipath) {
        // a multipath class's connections are MPTCP only if the peer answers
        // it over this rail: its responder's MPTCP listener, there while its
        // policy has a multipath class
        probe::Target t = r.target;
        t.port = r.mptcp_port;
        auto m =
            r.mptcp_port ? probe::answers_mptcp(t, milliseconds(1500)) : dp::Result<bool>(false);
        bool ok = m && *m;
        rj["mptcp"] = ok;
        std::string why;
        if (!r.mptcp_port)
          why =
              "its responder has no MPTCP listener: its policy has no multipath class (or "
              "its dualpathd predates the check), so the multipath classes' connections "
              "to it stay TCP on one rail, and are reset if it fails";
        else if (!m)
          why = fmt::format("an MPTCP connection to {} failed: {}", probe::to_string(t),
                            m.error().what());
        else if (ok)
          why = fmt::format("{} answers MPTCP over this rail", probe::to_string(t));
        else
          why = fmt::format(
              "{} answered without MPTCP: the multipath classes' connections to it fall back to "
              "TCP on one rail (reset if it fails); its kernel needs net.mptcp.enabled = 1, and "
              "nothing on the path may strip TCP options",
              probe::to_string(t));
        rows.push_back({ps.name, who + " mptcp", ok, why});
      }
      pj["rails"].push_back(rj);
    }
    // Separate topology: what a peer does with a connection placed on a
    // rail where its server does not listen. Its responder listens on each
    // rail's address with a port per rail, so a connect to its rail-N
    // address on rail M's port is exactly that case: accepted when the
    // peer's dualpathd hands it to the rail-M listener (sk_lookup), refused
    // where nothing does (a node without dualpathd, or an older one).
    if (pol->topology == dp::Topology::Separate && peer.hello.is_object() &&
        peer.rails.size() >= 2) {
      for (size_t i = 0; i < peer.rails.size(); ++i) {
        const PeerRail& r = peer.rails[i];
        const PeerRail& other = peer.rails[(i + 1) % peer.rails.size()];
        const auto& ps = pol->paths[r.path];
        if (!r.error.empty() || !other.error.empty() || !path_usable[ps.name]) continue;
        probe::Target t = r.target;
        t.port = other.target.port;
        auto cs = probe::connects(t, 3, milliseconds(1000));
        bool ok = cs.ms.size() == 3;
        rows.push_back(
            {ps.name, who + " handover", ok,
             ok ? fmt::format("a connection to {} on {}'s port {} is accepted: a server bound to "
                              "one rail's address there takes what is placed on another",
                              probe::to_string(t), other.peer_path, t.port)
                : fmt::format("{} of 3 connections to {} accepted ({} refused, {} unanswered): "
                              "a server bound to {}'s address there (NCCL, gloo, an RPC server "
                              "given an interface) would refuse what dualpath places on {}; "
                              "run dualpathd with topology = \"separate\" there (its sk_lookup "
                              "handover)",
                              cs.ms.size(), probe::to_string(t), cs.refused, cs.lost,
                              other.peer_path, r.peer_path)});
        for (auto& rj : pj["rails"])
          if (rj["path"] == ps.name) rj["handover"] = ok;
        // the same for UDP: a datagram to the rail-N address on rail M's
        // port, which the peer's responder echoes from its rail-M socket
        // (a peer whose dualpathd predates the echo is not asked)
        if (!peer.hello.value("udp_echo", false)) continue;
        auto us = probe::udp_echoes(t, 3, milliseconds(500));
        bool uok = us.answered > 0;
        rows.push_back(
            {ps.name, who + " udp handover", uok,
             uok ? fmt::format("{} of 3 datagrams to {} on {}'s port {} echoed: a UDP server "
                               "bound to one rail's address there gets what is placed on another",
                               us.answered, probe::to_string(t), other.peer_path, t.port)
             : !us.error.empty()
                 ? fmt::format("no datagram could be sent to {}: {}", probe::to_string(t), us.error)
                 : fmt::format("0 of 3 datagrams to {} echoed ({} refused, {} unanswered): a UDP "
                               "server bound to {}'s address there would not get what dualpath "
                               "places on {}; run dualpathd with topology = \"separate\" there "
                               "(its sk_lookup handover)",
                               probe::to_string(t), us.refused, us.lost, other.peer_path,
                               r.peer_path)});
        for (auto& rj : pj["rails"])
          if (rj["path"] == ps.name) rj["udp_handover"] = uok;
      }
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
  auto cpu_before = dp::cpu_times();
  uint64_t fallbacks_before = dp::mptcp_fallbacks();
  std::this_thread::sleep_for(std::chrono::duration<double>(a.seconds));
  auto cpus = dp::cpu_busy(cpu_before, dp::cpu_times());
  uint64_t fallbacks = dp::mptcp_fallbacks();
  auto after = dp::tcp_sockets();
  if (!after) return fail(g, "reading the node's TCP sockets failed: " + after.error().what());
  auto paths = request(g, "path.list", json::object(), &rc);
  if (!paths) return rc;
  auto events = request(g, "events", {{"since", 0}}, &rc);
  if (!events) return rc;

  // --- the rails, as the daemon sees them, and probes toward each peer
  dp::DiagnoseInput in;
  in.seconds = a.seconds;
  in.cpu_busy = cpus;
  in.multipath = pol->has_multipath();
  in.mptcp_fallbacks = fallbacks;
  in.mptcp_fallbacks_window = fallbacks - std::min(fallbacks, fallbacks_before);
  in.events = (*events)["events"];
  if (!a.peers.empty()) in.peer_hint = a.peers.front();
  for (const auto& p : *paths) in.rails.push_back({str(p["name"]), p["health"], p["measure"], {}});
  json probes = json::array();
  for (const auto& addr : *peers) {
    Peer peer = discover(*pol, addr, a.port);
    for (const auto& pr : peer.rails) {
      auto& r = in.rails[pr.path];
      dp::DiagnoseProbe dprobe{peer.addr, !dp::rail_usable(r.health), "", 0, 5, std::nullopt};
      if (dprobe.skipped) {
        r.probes.push_back(dprobe);
        continue;
      }
      RailProbe p = probe_rail(pr, dprobe.sent);
      json pj = {{"peer", peer.addr}, {"path", r.name}, {"loss", loss_of(p)}};
      dprobe.error = p.error;
      dprobe.lost = p.connect.lost;
      if (!p.error.empty() || p.connect.lost) {
        pj["error"] = p.error;
      } else if (p.echo) {
        auto rp = probe::percentiles(p.echo->us);
        dprobe.rtt_p50_us = rp.p50;
        pj["rtt_us"] = probe::to_json(rp);
      }
      r.probes.push_back(dprobe);
      probes.push_back(pj);
    }
  }

  // --- the node: TCP sockets by class, over the window
  std::map<uint64_t, const dp::TcpSocketInfo*> was;
  for (const auto& s : *before) was[s.cookie] = &s;
  std::map<int, dp::DiagnoseClass> by_class;
  for (const auto& s : *after) {
    if (s.state != 1) continue;  // TCP_ESTABLISHED
    int k = pol->classify(dp::Proto::Tcp, s.sport, s.dport, s.mark);
    if (k < 0) continue;
    auto& c = by_class[k];
    c.name = pol->classes[static_cast<size_t>(k)].name;
    ++c.sockets;
    c.unread += s.rqueue;
    if (s.rqueue >= in.limits.unread) ++c.unread_sockets;
    auto it = was.find(s.cookie);
    if (it == was.end()) continue;
    const auto& b = *it->second;
    c.busy_us += s.busy_us - b.busy_us;
    c.rwnd_limited_us += s.rwnd_limited_us - b.rwnd_limited_us;
    c.sndbuf_limited_us += s.sndbuf_limited_us - b.sndbuf_limited_us;
    c.bytes_acked += s.bytes_acked - b.bytes_acked;
    c.retrans += s.total_retrans - b.total_retrans;
    if (s.rwnd_limited_us > b.rwnd_limited_us &&
        std::find(c.rwnd_peers.begin(), c.rwnd_peers.end(), s.dst.str()) == c.rwnd_peers.end())
      c.rwnd_peers.push_back(s.dst.str());
  }
  for (const auto& [k, c] : by_class)
    if (a.klass.empty() || c.name == a.klass) in.classes.push_back(c);

  // --- the decision chain (core/diagnose.h)
  dp::Diagnosis d = dp::diagnose(in);
  json conclusion = dp::conclusion_json(d);
  if (g.json_out) {
    json classes = json::object();
    for (const auto& [k, c] : by_class)
      classes[c.name] = {{"sockets", c.sockets},
                         {"busy_us", c.busy_us},
                         {"rwnd_limited_us", c.rwnd_limited_us},
                         {"sndbuf_limited_us", c.sndbuf_limited_us},
                         {"bytes_acked", c.bytes_acked},
                         {"retrans", c.retrans},
                         {"rqueue", c.unread}};
    json rj = json::array();
    for (const auto& r : d.rails)
      rj.push_back({{"path", r.name}, {"bad", r.bad}, {"evidence", r.evidence}});
    print_json(g, {{"conclusion", conclusion},
                   {"rails", rj},
                   {"probes", probes},
                   {"classes", classes},
                   {"cpu_busy", cpus},
                   {"seconds", a.seconds}});
    return 0;
  }
  std::cout << "conclusion: " << d.kind << ": " << d.summary << "\n"
            << "evidence:\n";
  for (const auto& e : d.evidence) std::cout << "  - " << e << "\n";
  std::cout << "next:\n";
  for (const auto& n : d.next) std::cout << "  $ " << n << "\n";
  return 0;
}

void add_diagnostics(CLI::App& app, const Globals& g, Action& action) {
  auto val = std::make_shared<ValidateArgs>();
  auto* valc = app.add_subcommand(
      "validate", "check this node before it takes traffic: go/no-go (exit 0 go, 1 no-go)");
  valc->add_option("--peer", val->peers, "a node running dualpathd to measure toward (repeat)");
  valc->add_option("--port", val->port, "the peers' responder port ([responder] port)")
      ->capture_default_str();
  valc->add_option("--duration", val->duration, "seconds per throughput test")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 30.0));
  valc->add_option("--streams", val->streams, "connections of the multi-stream tests")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  valc->add_option("--min-throughput", val->min_throughput,
                   "no-go below this fraction of a path's capacity (multi-stream)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  valc->callback([&g, &action, val] { action = [&g, val] { return cmd_validate(g, *val); }; });

  auto prb = std::make_shared<ProbeArgs>();
  auto* prbc = app.add_subcommand(
      "probe", "TCP connect time, RTT percentiles and loss to PEER over each rail");
  prbc->add_option("PEER", prb->peer, "a node running dualpathd")->required();
  prbc->add_option("--class", prb->klass, "also show which rails this class uses now")
      ->type_name(kClass);
  prbc->add_option("--count", prb->count, "connects and round trips per rail")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  prbc->add_option("--port", prb->port, "the peer's responder port")->capture_default_str();
  prbc->callback([&g, &action, prb] { action = [&g, prb] { return cmd_probe(g, *prb); }; });

  auto dia = std::make_shared<DiagnoseArgs>();
  auto* diac = app.add_subcommand(
      "diagnose",
      "the path, a common upstream, or inside the node? (live figures, optional probes)");
  diac->add_option("--peer", dia->peers, "also probe this node over each rail (repeat)");
  diac->add_option("--class", dia->klass, "look only at this class's connections")
      ->type_name(kClass);
  diac->add_option("--seconds", dia->seconds, "how long to watch sockets and CPUs")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 60.0));
  diac->add_option("--port", dia->port, "the peers' responder port")->capture_default_str();
  diac->callback([&g, &action, dia] { action = [&g, dia] { return cmd_diagnose(g, *dia); }; });
}

}  // namespace dpctl

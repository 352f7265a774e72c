// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/diagnose.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace dp {

namespace {

std::string str(const json& j) {
  if (j.is_null()) return "-";
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

// A number inside an object that may be null (no samples yet): 0 then.
double num(const json& j, const char* key) {
  if (!j.is_object()) return 0;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0;
}

// A rail's verdict from the daemon's view of it and the probes over it.
RailVerdict judge(const DiagnoseRail& in, const DiagnoseLimits& lim) {
  RailVerdict r{in.name, false, {}};
  const json& h = in.health;
  std::string state = h.is_object() ? str(h["state"]) : "-";
  // down or suspect: a fault now; holddown, ramping or drained: not now
  if (state == "down" || state == "suspect") r.bad = true;
  if (h.is_object() && state != "up")
    r.evidence.push_back(
        fmt::format("health {} for {:.0f} s ({})", state, num(h, "seconds"), str(h["reason"])));
  if (h.is_object() && h["bfd"].is_object() && h["bfd"]["state"] != "up") {
    r.bad = true;
    r.evidence.push_back(fmt::format("BFD to {} {} (diag {})", str(h["bfd"]["peer"]),
                                     str(h["bfd"]["state"]), str(h["bfd"]["diag"])));
  }
  const json& m = in.measure;
  if (m.is_object()) {
    double loss = num(m["loss"], "ratio");
    if (loss >= lim.loss) {
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
  // probes toward each peer, when asked: a rail that cannot reach one is bad
  for (const auto& p : in.probes) {
    if (p.skipped) {
      r.evidence.push_back("not probed: failed over to another rail");
    } else if (!p.error.empty() || p.lost) {
      r.bad = true;
      r.evidence.push_back(fmt::format("probe to {}: {} of {} connects unanswered{}", p.peer,
                                       p.lost, p.sent,
                                       p.error.empty() ? "" : " (" + p.error + ")"));
    } else if (p.rtt_p50_us) {
      r.evidence.push_back(fmt::format("probe to {}: RTT p50 {:.0f} us", p.peer, *p.rtt_p50_us));
    }
  }
  return r;
}

// What keeps a class's connections waiting inside a node, if anything.
std::vector<std::string> inside(const DiagnoseClass& c, const DiagnoseLimits& lim) {
  std::vector<std::string> out;
  auto share = [&](uint64_t part) {
    return c.busy_us ? static_cast<double>(part) / static_cast<double>(c.busy_us) : 0;
  };
  if (c.busy_us && share(c.rwnd_limited_us) >= lim.waited)
    out.push_back(fmt::format(
        "class {}: its {} connection{} to {} waited for the receiver's window {:.0f}% of "
        "their sending time: the receiving application (or its CPU) does not read fast enough",
        c.name, c.sockets, c.sockets == 1 ? "" : "s", fmt::join(c.rwnd_peers, ", "),
        share(c.rwnd_limited_us) * 100));
  if (c.busy_us && share(c.sndbuf_limited_us) >= lim.waited)
    out.push_back(
        fmt::format("class {}: send-buffer-limited {:.0f}% of its sending time: "
                    "the sending application writes too little at a time",
                    c.name, share(c.sndbuf_limited_us) * 100));
  if (c.unread_sockets)
    out.push_back(
        fmt::format("class {}: {} bytes received and not read by the application "
                    "on {} socket{} of this node",
                    c.name, c.unread, c.unread_sockets, c.unread_sockets == 1 ? "" : "s"));
  if (c.retrans && c.bytes_acked)
    out.push_back(
        fmt::format("class {}: {} segments retransmitted while the rails are "
                    "clean: queueing on the host (tc -s qdisc)",
                    c.name, c.retrans));
  return out;
}

}  // namespace

bool rail_usable(const json& health) {
  if (!health.is_object()) return true;
  std::string state = str(health["state"]);
  return state == "up" || state == "ramping";
}

namespace {

// Every rail's evidence, named by its rail.
void add_rail_evidence(Diagnosis& d) {
  for (const auto& r : d.rails)
    for (const auto& e : r.evidence) d.evidence.push_back(r.name + ": " + e);
}

// Some rails are bad and others fine: the bad rails' paths are at fault.
// With what the scheduler did about it (the newest events naming a bad
// rail) and where to look next.
void blame_paths(const DiagnoseInput& in, Diagnosis& d) {
  const std::string& peer = in.peer_hint;
  std::string names, good;
  for (const auto& r : d.rails) {
    std::string& list = r.bad ? names : good;
    list += (list.empty() ? "" : ", ") + r.name;
  }
  add_rail_evidence(d);
  for (auto it = in.events.rbegin(); it != in.events.rend() && d.scheduler.size() < 3; ++it) {
    std::string path = (*it)["path"].is_string() ? (*it)["path"].get<std::string>() : "";
    bool names_bad = std::any_of(d.rails.begin(), d.rails.end(),
                                 [&](const RailVerdict& r) { return r.bad && path == r.name; });
    if (names_bad)
      d.scheduler.push_back(fmt::format("{} {} {}: {}", str((*it)["time"]), str((*it)["kind"]),
                                        path, str((*it)["reason"])));
  }
  for (const auto& s : d.scheduler) d.evidence.push_back("dualpath: " + s);
  d.kind = "path";
  d.path = names;
  d.summary = fmt::format(
      "the path of {} is at fault and {} is fine: the NIC, cable, switch port or fabric of {}",
      names, good, names);
  d.next = {fmt::format("dpctl probe {}", peer),
            fmt::format("dpctl path show {}", d.rails[0].bad ? d.rails[0].name : names),
            "dpctl events", fmt::format("ethtool -S {} ; ip -s link show {}", names, names)};
}

Diagnosis diagnose_rails(const DiagnoseInput& in) {
  Diagnosis d;
  for (const auto& r : in.rails) d.rails.push_back(judge(r, in.limits));
  size_t bad = static_cast<size_t>(
      std::count_if(d.rails.begin(), d.rails.end(), [](auto& r) { return r.bad; }));
  double busiest =
      in.cpu_busy.empty() ? 0 : *std::max_element(in.cpu_busy.begin(), in.cpu_busy.end());
  double mean = 0;
  for (double c : in.cpu_busy) mean += c / static_cast<double>(in.cpu_busy.size());
  const std::string& peer = in.peer_hint;

  if (bad == d.rails.size() && bad > 0) {
    d.kind = "upstream";
    d.summary =
        "every rail is bad: look at what they share (the peer nodes, a common switch or spine, "
        "this node's NICs and driver), not at one path";
    add_rail_evidence(d);
    d.next = {
        fmt::format("dpctl validate --peer {} (and toward another node: one peer or all?)", peer),
        "dpctl events (when did each rail go)", "ip -s link; ethtool -S <rail> (errors, drops)"};
    return d;
  }
  if (bad > 0) {
    blame_paths(in, d);
    return d;
  }
  add_rail_evidence(d);
  std::vector<std::string> node;
  if (busiest >= in.limits.cpu_busy)
    node.push_back(fmt::format("CPU: busiest {:.0f}%, mean {:.0f}% over {:.0f} s", busiest * 100,
                               mean * 100, in.seconds));
  for (const auto& c : in.classes) {
    auto why = inside(c, in.limits);
    node.insert(node.end(), why.begin(), why.end());
  }
  if (!node.empty()) {
    d.kind = "node";
    d.summary =
        "the rails are fine; the bottleneck is inside a node (CPU, host queueing or the "
        "application)";
    d.evidence.insert(d.evidence.begin(), node.begin(), node.end());
    d.next = {"ss -tnip (Recv-Q, Send-Q, rwnd_limited per connection)",
              "mpstat -P ALL 1 / top (CPU and softirq of the receiving and sending processes)",
              "tc -s qdisc show (drops and backlog on the rails)"};
    return d;
  }
  d.kind = "none";
  d.summary =
      "no fault found: the rails are healthy and no class's connections waited on either end";
  d.evidence.push_back(
      fmt::format("CPU: busiest {:.0f}%, mean {:.0f}%", busiest * 100, mean * 100));
  d.next = {fmt::format("dpctl probe {} --count 200 (tail latency)", peer),
            "dpctl budget (is the planned load above what the rails carry?)"};
  return d;
}

}  // namespace

Diagnosis diagnose(const DiagnoseInput& in) {
  Diagnosis d = diagnose_rails(in);
  // Whatever the verdict: a multipath class's connection that fell back to
  // TCP lives on one rail, and that rail's failure resets it (NCCL and gloo
  // then abort), which is what the class was asked for to avoid.
  if (in.multipath && in.mptcp_fallbacks > 0) {
    d.evidence.push_back(fmt::format(
        "MPTCP: {} connection{} of this node asked for MPTCP and fell back to TCP ({} over the "
        "last {:.0f} s): a multipath class's connection that falls back is on one rail and is "
        "reset if that rail fails",
        in.mptcp_fallbacks, in.mptcp_fallbacks == 1 ? "" : "s", in.mptcp_fallbacks_window,
        in.seconds));
    d.next.push_back(fmt::format(
        "dpctl validate --peer {} (its mptcp check names a peer that answers without MPTCP)",
        in.peer_hint));
  }
  return d;
}

json conclusion_json(const Diagnosis& d) {
  json j = {{"kind", d.kind}, {"summary", d.summary}};
  if (d.kind == "path") {
    j["path"] = d.path;
    j["scheduler"] = d.scheduler;
  }
  j["evidence"] = d.evidence;
  j["next"] = d.next;
  return j;
}

}  // namespace dp

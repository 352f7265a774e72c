// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/views.h"

#include <netinet/in.h>

#include <cstring>

#include <fmt/chrono.h>

#include "dualpath/core/encode.h"
#include "dualpath/core/units.h"

namespace dp {

namespace {

double secs(Nanos d) { return std::chrono::duration<double>(d).count(); }

json render_measure(const PathMeasure& pm, const std::vector<std::string>& rdma_devices,
                    Clock::time_point now) {
  const auto& last = pm.latest();
  json rtt = nullptr, loss = nullptr;
  if (auto r = pm.rtt_us())
    rtt = {{"p50_us", r->p50},
           {"p95_us", r->p95},
           {"p99_us", r->p99},
           {"samples", r->samples},
           {"window_s", secs(r->window)}};
  if (auto l = pm.loss())
    loss = {{"ratio", l->value},
            {"retrans_segs", l->numerator},
            {"segs_out", l->denominator},
            {"window_s", secs(l->window)}};
  const auto& rec = pm.reconciliation();
  json m = {
      {"tx_bps", pm.tx_bps()},
      {"rx_bps", pm.rx_bps()},
      {"rate_window_s", secs(pm.rate_window())},
      {"utilisation", pm.utilisation()},
      {"rtt", rtt},
      {"loss", loss},
      {"tcp",
       {{"segs_out", last.tcp.segs_out},
        {"retrans_segs", last.tcp.retrans_segs},
        {"rto_events", last.tcp.rto_events},
        {"rtt_samples", last.tcp.rtt_samples}}},
      {"link",
       {{"tx_bytes", last.link.tx_bytes},
        {"rx_bytes", last.link.rx_bytes},
        {"tx_packets", last.link.tx_packets},
        {"rx_packets", last.link.rx_packets},
        {"tx_dropped", last.link.tx_dropped},
        {"rx_dropped", last.link.rx_dropped},
        {"tx_errors", last.link.tx_errors},
        {"rx_errors", last.link.rx_errors},
        {"oper_up", last.link.oper_up}}},
      {"reconciliation",
       {{"agree", rec.agree},
        {"datapath_bytes", rec.datapath_bytes},
        {"link_bytes", rec.link_bytes},
        {"window_s", secs(rec.window)},
        {"explanation", rec.explanation}}},
      {"sample_age_s", secs(std::chrono::duration_cast<Nanos>(now - last.t))},
      {"rdma", nullptr},
  };
  if (last.rdma) {
    const auto& rd = *last.rdma;
    m["rdma"] = {{"devices", rdma_devices},
                 {"tx_bps", pm.rdma_tx_bps()},
                 {"rx_bps", pm.rdma_rx_bps()},
                 {"tx_bytes", rd.tx_bytes},
                 {"rx_bytes", rd.rx_bytes},
                 {"tx_packets", rd.tx_packets},
                 {"rx_packets", rd.rx_packets},
                 {"cnp_sent", rd.cnp_sent},
                 {"cnp_handled", rd.cnp_handled},
                 {"ecn_marked", rd.ecn_marked},
                 {"out_of_sequence", rd.out_of_sequence},
                 {"seq_errors", rd.seq_errors},
                 {"local_ack_timeouts", rd.local_ack_timeouts}};
  }
  return m;
}

std::string address(const __u32* a) {
  IpAddr ip;
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(a, mapped, 12) == 0) {
    ip.family = AF_INET;
    std::memcpy(ip.bytes.data(), reinterpret_cast<const uint8_t*>(a) + 12, 4);
  } else {
    ip.family = AF_INET6;
    std::memcpy(ip.bytes.data(), a, 16);
  }
  return ip.str();
}

}  // namespace

json render_path(const PathView& v, Clock::time_point now) {
  const PathSpec& ps = *v.spec;
  json tc = nullptr;
  if (v.tc)
    tc = {{"egress_prog_id", v.tc->egress_prog_id},
          {"ingress_prog_id", v.tc->ingress_prog_id},
          {"clsact_owned", v.tc->clsact_owned}};
  json exc = json::object();
  for (int e = 0; e < DP_EXC_MAX; ++e)
    if (v.exceptions[static_cast<size_t>(e)])
      exc[exception_name(e)] = v.exceptions[static_cast<size_t>(e)];
  json m = nullptr;
  if (v.measure && v.measure->has_sample()) m = render_measure(*v.measure, v.rdma_devices, now);
  double tx_bps = m.is_null() ? 0.0 : m["tx_bps"].get<double>();
  return {
      {"name", ps.name},
      {"interface", ps.interface},
      {"ifindex", v.ifindex},
      {"slot", v.slot},
      {"capacity_bps", ps.capacity_bps},
      {"table", ps.table},
      {"fwmark", ps.fwmark},
      {"gateway", ps.gateway ? json(ps.gateway->str()) : json(nullptr)},
      {"gateway6", ps.gateway6 ? json(ps.gateway6->str()) : json(nullptr)},
      {"tc", tc},
      {"tx_bytes", v.sum.tx_bytes},
      {"tx_packets", v.sum.tx_packets},
      {"rx_bytes", v.sum.rx_bytes},
      {"rx_packets", v.sum.rx_packets},
      {"redirected_out_packets", v.sum.redirect_packets},
      {"redirected_out_bytes", v.sum.redirect_bytes},
      {"tx_bps", tx_bps},
      {"rx_bps", m.is_null() ? 0.0 : m["rx_bps"].get<double>()},
      {"datapath_tx_bps", v.datapath_tx_bps},
      {"utilisation", m.is_null() ? 0.0 : m["utilisation"].get<double>()},
      {"measure", m},
      {"exceptions", exc},
      {"interface_present", v.present},
      {"health", v.health},
  };
}

namespace {

// A class's counters by path (its shares, bytes, TCP figures) and their
// totals over the paths; rail: the path that holds all of its share, if one.
struct ClassPathCounters {
  json shares = json::object(), tx = json::object(), rx = json::object(), tcp = json::object();
  uint64_t tx_total = 0, rx_total = 0, flowlets = 0, replaced = 0, placed = 0;
  std::optional<std::string> rail;
};

ClassPathCounters class_path_counters(const ClassView& v) {
  const dp_decision& d = v.decision;
  ClassPathCounters out;
  for (const auto& p : v.paths) {
    const auto& c = p.counters;
    const TcpCounters& t = p.tcp;
    out.shares[p.name] = 100.0 * d.share[p.rail_slot] / DP_SHARE_SCALE;
    out.tx[p.name] = c.tx_bytes;
    out.tcp[p.name] = {{"srtt_mean_us", t.rtt_samples ? static_cast<double>(t.srtt_us_sum) /
                                                            static_cast<double>(t.rtt_samples)
                                                      : 0.0},
                       {"rtt_samples", t.rtt_samples},
                       {"segs_out", t.segs_out},
                       {"retrans_segs", t.retrans_segs},
                       {"rto_events", t.rto_events}};
    out.rx[p.name] = c.rx_bytes;
    out.tx_total += c.tx_bytes;
    out.rx_total += c.rx_bytes;
    out.flowlets += c.flowlets;
    out.replaced += c.flows_replaced;
    out.placed += c.flows_placed;
    if (d.share[p.rail_slot] == DP_SHARE_SCALE) out.rail = p.name;
  }
  return out;
}

// Beside the decided shares: what the paths carried under the decision
// (null before anything was carried).
json class_carried_shares(const ClassView& v) {
  if (!v.carried) return nullptr;
  json carried = json::object();
  for (size_t i = 0; i < v.paths.size() && i < v.carried->share.size(); ++i)
    carried[v.paths[i].name] = 100.0 * v.carried->share[i] / DP_SHARE_SCALE;
  return carried;
}

json class_cgroups(const ClassView& v) {
  json cgroups = json::array();
  for (const auto& g : v.cgroups)
    cgroups.push_back({{"rule", g.rule},
                       {"cgroup", g.dir.empty() ? json(nullptr) : json(g.dir)},
                       {"id", g.id ? json(g.id) : json(nullptr)},
                       {"present", g.id != 0}});
  return cgroups;
}

}  // namespace

json render_class(const ClassView& v) {
  const ClassSpec& cs = *v.spec;
  const dp_decision& d = v.decision;
  const auto [shares, tx, rx, tcp, tx_total, rx_total, flowlets, replaced, placed, rail] =
      class_path_counters(v);
  json ports = json::array();
  for (auto& r : cs.ports) ports.push_back(r.str());
  json connections = json::object();
  for (const auto& p : v.paths) connections[p.name] = p.connections;
  // kept for the class on each rail while it is carried there (bits a second)
  json reserve = nullptr;
  if (cs.reserve_bps || cs.reserve_share > 0) {
    reserve = json::object();
    for (const auto& p : v.paths) reserve[p.name] = cs.reserve_on(p.capacity_bps);
  }
  json decided = json::object();
  for (size_t i = 0; i < v.paths.size() && i < v.decided.size(); ++i)
    decided[v.paths[i].name] = 100.0 * v.decided[i] / DP_SHARE_SCALE;
  json carried = class_carried_shares(v);
  // what NCCL plugins sent in the class (their count: the kernel counts
  // their streams in the class their ports or cgroup match)
  json nccl = json::object();
  for (const auto& p : v.paths) nccl[p.name] = p.nccl_tx_bytes;
  json cgroups = class_cgroups(v);
  return {
      {"name", cs.name},
      {"slot", v.slot},
      {"kind", to_string(cs.kind)},
      {"priority", cs.priority},
      {"ports", ports},
      {"match", to_string(cs.match)},
      {"mark", cs.mark ? json(*cs.mark) : json(nullptr)},
      {"cgroups", cgroups},
      {"prefer", cs.prefer},
      {"rail", rail ? json(*rail) : json(nullptr)},
      {"shares", shares},
      {"decided_shares", decided},
      {"carried_shares", carried},
      {"carried_bytes", v.carried ? json(v.carried->bytes) : json(nullptr)},
      {"carried_seconds", v.carried ? json(v.carried->seconds) : json(nullptr)},
      {"pinned", (d.flags & DP_DECISION_F_PINNED) != 0},
      {"pinned_by", (d.flags & kOperatorPinned) ? "operator" : (cs.pinned ? "policy" : "")},
      {"tx_bytes", tx_total},
      {"rx_bytes", rx_total},
      {"tx_bytes_by_path", tx},
      {"rx_bytes_by_path", rx},
      {"nccl_tx_bytes_by_path", nccl},
      {"tcp_by_path", tcp},
      {"flows_placed", placed},
      {"flowlets", flowlets},
      {"flows_replaced", replaced},
      {"dscp", cs.dscp ? json(*cs.dscp) : json(nullptr)},
      {"skb_priority", cs.skb_priority ? json(*cs.skb_priority) : json(nullptr)},
      {"reserve_bps", reserve},
      {"multipath", cs.multipath},
      // TCP's minimum RTO for the class's connections; null: the kernel's 200 ms
      {"rto_min_ms", cs.rto_min.count() > 0
                         ? json(std::chrono::duration<double, std::milli>(cs.rto_min).count())
                         : json(nullptr)},
      // the longest backoff between its retransmissions; null: the kernel's 120 s
      {"rto_max_ms", cs.rto_max.count() > 0
                         ? json(std::chrono::duration<double, std::milli>(cs.rto_max).count())
                         : json(nullptr)},
      // "redirect": a flow may move between rails (shared topology);
      // "connect-time": a connection is placed when it is made (separate)
      {"placement", v.topology == Topology::Separate ? "connect-time" : "redirect"},
      {"connections_by_path", connections},
      {"connections_unmapped", v.connections_unmapped},
  };
}

json render_steering(const Policy& p) {
  json out = json::array();
  for (const auto& ps : p.paths)
    for (const auto& r : ps.routes) {
      json e = {{"prefix", r.str()}, {"path", ps.name}};
      if (p.topology == Topology::Separate) {
        e["steering"] = "connect-time";
        e["why"] = fmt::format(
            "{}'s own network: a connection toward it is placed on a rail when it is made, as the "
            "same host on that rail's network; established connections stay",
            ps.name);
      } else {
        e["steering"] = "redirect";
        e["why"] = "every rail routes it (shared topology): a flow may move between rails";
      }
      out.push_back(std::move(e));
    }
  return out;
}

const char* rule_name(int rule) {
  switch (rule) {
    case DP_RULE_MARK:
      return "mark";
    case DP_RULE_PORT:
      return "port";
    case DP_RULE_CGROUP:
      return "cgroup";
    case DP_RULE_DEFAULT:
      return "default";
    default:
      return "";
  }
}

json render_flows(const std::vector<FlowRow>& rows, size_t total,
                  const std::array<std::string, DP_MAX_CLASSES>& class_name,
                  const std::array<std::string, DP_MAX_RAILS>& rail_name, uint64_t now_ns) {
  json out = json::array();
  for (auto& r : rows)
    out.push_back({
        {"proto", r.key.proto == IPPROTO_TCP ? "tcp" : "udp"},
        {"src", address(r.key.saddr)},
        {"sport", ntohs(r.key.sport)},
        {"dst", address(r.key.daddr)},
        {"dport", ntohs(r.key.dport)},
        {"class", class_name[r.flow.cls]},
        {"rule", rule_name(r.flow.rule)},
        {"path", rail_name[r.flow.rail]},
        {"bytes", r.flow.bytes},
        {"packets", r.flow.packets},
        {"srtt_us", r.flow.srtt_us},
        {"retrans_segs", r.flow.retrans_segs},
        {"rto_events", r.flow.rto_events},
        {"replacements", r.flow.replacements},
        {"flowlets", r.flow.flowlet},
        {"burst_bytes", r.flow.burst_bytes},
        {"last_burst_bytes", r.flow.last_burst},
        // placed as a stream (by count, moved while it sends), not by bursts
        {"stream", (r.flow.flags & DP_FLOW_F_STREAM) != 0},
        {"idle_s", now_ns > r.flow.last_seen_ns
                       ? static_cast<double>(now_ns - r.flow.last_seen_ns) / 1e9
                       : 0.0},
    });
  return {{"flows", out}, {"total", total}};
}

json render_health(const PathHealth& h, const BfdView* bfd, SchedClock::time_point now) {
  auto ago = std::chrono::duration<double>(now - h.since()).count();
  auto wall = std::chrono::system_clock::now() -
              std::chrono::duration_cast<std::chrono::system_clock::duration>(now - h.since());
  json j = {{"state", to_string(h.state())},
            {"since", fmt::format("{:%Y-%m-%dT%H:%M:%S}",
                                  fmt::localtime(std::chrono::system_clock::to_time_t(wall)))},
            {"seconds", ago},
            {"reason", h.reason()},
            {"weight", h.weight()},
            {"failures", h.failures()},
            {"bfd", nullptr}};
  if (bfd && bfd->session) {
    const auto& s = *bfd->session;
    j["bfd"] = {
        {"peer", bfd->peer},
        {"state", bfd::to_string(s.state())},
        {"remote_state", bfd::to_string(s.remote_state())},
        {"diag", bfd::to_string(s.diag())},
        {"local_discriminator", s.local_disc()},
        {"remote_discriminator", s.remote_disc()},
        {"auth", bfd::to_string(s.auth())},
        {"tx_interval_ms", std::chrono::duration<double, std::milli>(s.tx_interval()).count()},
        {"detection_ms", std::chrono::duration<double, std::milli>(s.detection_time()).count()},
        {"rx", s.rx_packets()},
        {"tx", s.tx_packets()},
        {"discarded", bfd->discarded}};
  }
  return j;
}

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/metrics.h"

#include <prometheus/text_serializer.h>

#include <cmath>
#include <deque>
#include <limits>
#include <sstream>

#include "dualpath/core/encode.h"

namespace dp {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

ClientMetric::Label L(std::string n, std::string v) { return {std::move(n), std::move(v)}; }

struct Builder {
  std::deque<MetricFamily> out;  // a deque: family() hands out references that must stay valid
  MetricFamily& family(std::string name, std::string help, MetricType type) {
    out.push_back({std::move(name), std::move(help), type, {}});
    return out.back();
  }
  static void add(MetricFamily& f, std::vector<ClientMetric::Label> labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    if (f.type == MetricType::Counter)
      m.counter.value = value;
    else
      m.gauge.value = value;
    f.metric.push_back(std::move(m));
  }
};

}  // namespace

MetricFamily metrics_age_family(double seconds) {
  Builder b;
  auto& f = b.family("dualpath_metrics_age_seconds",
                     "seconds since the daemon's loop published these figures, taken when "
                     "scraped: it grows while the loop hangs, though the exporter answers",
                     MetricType::Gauge);
  Builder::add(f, {}, seconds);
  return std::move(f);
}

void TickTimes::record(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  if (i < kBounds.size()) ++counts[i];
  ++total;
  sum += seconds;
  last = seconds;
}

std::vector<MetricFamily> build_metrics(const MetricsView& v) {
  Builder b;
  auto& build = b.family("dualpath_build_info", "dualpath build", MetricType::Gauge);
  Builder::add(build, {L("version", v.version)}, 1);
  auto& pol =
      b.family("dualpath_policy_info",
               "the running policy; hash is the content hash of the file, and cluster, group and "
               "group_hash those dpctl policy render wrote (empty for a policy written by hand)",
               MetricType::Gauge);
  Builder::add(pol,
               {L("node", v.node), L("file", v.policy_file), L("hash", v.policy_hash),
                L("cluster", v.cluster), L("group", v.group), L("group_hash", v.group_hash)},
               1);

  auto& cap = b.family("dualpath_path_capacity_bytes_per_second",
                       "capacity of the path from the policy", MetricType::Gauge);
  auto& util = b.family("dualpath_path_utilisation_ratio",
                        "transmit rate (link plus RDMA) over capacity, EWMA", MetricType::Gauge);
  auto& rate = b.family("dualpath_path_transmit_bytes_per_second", "link transmit rate, EWMA",
                        MetricType::Gauge);
  auto& txb = b.family("dualpath_path_transmit_bytes_total",
                       "bytes the link sent (kernel statistics)", MetricType::Counter);
  auto& rxb = b.family("dualpath_path_receive_bytes_total",
                       "bytes the link received (kernel statistics)", MetricType::Counter);
  auto& txd = b.family("dualpath_path_transmit_drops_total", "packets the link dropped on transmit",
                       MetricType::Counter);
  auto& rxd = b.family("dualpath_path_receive_drops_total", "packets the link dropped on receive",
                       MetricType::Counter);
  auto& txe =
      b.family("dualpath_path_transmit_errors_total", "link transmit errors", MetricType::Counter);
  auto& rxe =
      b.family("dualpath_path_receive_errors_total", "link receive errors", MetricType::Counter);
  auto& rtt = b.family("dualpath_path_rtt_seconds",
                       "TCP smoothed RTT (sockops): quantiles over the measurement window, count "
                       "and sum since start",
                       MetricType::Summary);
  auto& loss = b.family("dualpath_path_loss_ratio",
                        "retransmitted over sent TCP segments over the measurement window",
                        MetricType::Gauge);
  auto& agree =
      b.family("dualpath_path_counters_agree",
               "1 when the datapath's and the link's transmit counters agree", MetricType::Gauge);
  auto& age =
      b.family("dualpath_path_sample_age_seconds", "age of the newest sample", MetricType::Gauge);
  auto& exc = b.family("dualpath_datapath_passed_packets_total",
                       "packets the datapath passed untouched, by reason (it never drops)",
                       MetricType::Counter);
  auto& rdma_tx =
      b.family("dualpath_path_rdma_transmit_bytes_per_second",
               "RDMA transmit rate of the path's RDMA devices, EWMA", MetricType::Gauge);
  struct RdmaFamily {
    MetricFamily* f;
    uint64_t RdmaCounters::*field;
  };
  const std::pair<const char*, std::pair<const char*, uint64_t RdmaCounters::*>> rdma_defs[] = {
      {"dualpath_rdma_transmit_bytes_total",
       {"RDMA bytes sent (port_xmit_data x 4)", &RdmaCounters::tx_bytes}},
      {"dualpath_rdma_receive_bytes_total",
       {"RDMA bytes received (port_rcv_data x 4)", &RdmaCounters::rx_bytes}},
      {"dualpath_rdma_cnp_sent_total",
       {"congestion notification packets sent", &RdmaCounters::cnp_sent}},
      {"dualpath_rdma_cnp_handled_total",
       {"congestion notification packets handled", &RdmaCounters::cnp_handled}},
      {"dualpath_rdma_ecn_marked_packets_total",
       {"ECN-marked RoCE packets received", &RdmaCounters::ecn_marked}},
      {"dualpath_rdma_out_of_sequence_total",
       {"out-of-sequence packets received", &RdmaCounters::out_of_sequence}},
      {"dualpath_rdma_sequence_errors_total",
       {"packet sequence errors", &RdmaCounters::seq_errors}},
      {"dualpath_rdma_local_ack_timeouts_total",
       {"local ACK timeouts", &RdmaCounters::local_ack_timeouts}},
  };
  std::vector<RdmaFamily> rdma_families;
  for (auto& [name, d] : rdma_defs)
    rdma_families.push_back({&b.family(name, d.first, MetricType::Counter), d.second});
  for (const auto& p : v.paths) {
    auto path = L("path", p.name);
    Builder::add(cap, {path}, static_cast<double>(p.capacity_bps) / 8);
    for (int e = 0; e < DP_EXC_MAX; ++e)
      Builder::add(exc, {path, L("reason", exception_name(e))},
                   static_cast<double>(p.exceptions[e]));
    if (!p.measure || !p.measure->has_sample()) continue;
    const auto& m = *p.measure;
    const auto& last = m.latest();
    Builder::add(util, {path}, m.utilisation());
    Builder::add(rate, {path}, m.tx_bps() / 8);
    Builder::add(rdma_tx, {path}, m.rdma_tx_bps() / 8);
    Builder::add(txb, {path}, static_cast<double>(last.link.tx_bytes));
    Builder::add(rxb, {path}, static_cast<double>(last.link.rx_bytes));
    Builder::add(txd, {path}, static_cast<double>(last.link.tx_dropped));
    Builder::add(rxd, {path}, static_cast<double>(last.link.rx_dropped));
    Builder::add(txe, {path}, static_cast<double>(last.link.tx_errors));
    Builder::add(rxe, {path}, static_cast<double>(last.link.rx_errors));
    {
      ClientMetric sm;
      sm.label = {path};
      sm.summary.sample_count = last.tcp.rtt_samples;
      sm.summary.sample_sum = static_cast<double>(last.tcp.srtt_us_sum) / 1e6;
      if (auto r = m.rtt_us())
        sm.summary.quantile = {{0.5, r->p50 / 1e6}, {0.95, r->p95 / 1e6}, {0.99, r->p99 / 1e6}};
      rtt.metric.push_back(std::move(sm));
    }
    if (auto l = m.loss()) Builder::add(loss, {path}, l->value);
    Builder::add(agree, {path}, m.reconciliation().agree ? 1 : 0);
    if (last.rdma)
      for (auto& rf : rdma_families)
        Builder::add(*rf.f, {path}, static_cast<double>((*last.rdma).*rf.field));
    Builder::add(age, {path}, std::chrono::duration<double>(Clock::now() - last.t).count());
  }

  auto& ctx = b.family("dualpath_class_transmit_bytes_total",
                       "bytes of a class that left by a path (datapath)", MetricType::Counter);
  auto& ctp = b.family("dualpath_class_transmit_packets_total",
                       "packets of a class that left by a path (datapath)", MetricType::Counter);
  auto& crx = b.family("dualpath_class_receive_bytes_total",
                       "bytes of a class that arrived on a path (datapath)", MetricType::Counter);
  auto& cred =
      b.family("dualpath_class_redirected_packets_total",
               "packets of a class redirected from a path to another", MetricType::Counter);
  auto& segs = b.family("dualpath_tcp_segments_sent_total", "TCP data segments sent (sockops)",
                        MetricType::Counter);
  auto& retr = b.family("dualpath_tcp_retransmitted_segments_total",
                        "TCP segments retransmitted (sockops)", MetricType::Counter);
  auto& rto = b.family("dualpath_tcp_retransmission_timeouts_total", "TCP RTO events (sockops)",
                       MetricType::Counter);
  auto& hist = b.family("dualpath_tcp_rtt_seconds",
                        "TCP smoothed RTT at each RTT sample (sockops), log2 buckets",
                        MetricType::Histogram);
  auto& dsh =
      b.family("dualpath_class_decided_share_ratio",
               "the share of a class the scheduler's decision gives a path", MetricType::Gauge);
  auto& csh = b.family("dualpath_class_carried_share_ratio",
                       "the share of a class's bytes a path carried under its decision (since "
                       "the decision, at most the last minute; absent below 1 MiB)",
                       MetricType::Gauge);
  for (const auto& c : v.classes) {
    std::vector<ClientMetric::Label> l{L("class", c.klass), L("path", c.path)};
    if (c.decided) Builder::add(dsh, l, *c.decided);
    if (c.carried) Builder::add(csh, l, *c.carried);
    Builder::add(ctx, l, static_cast<double>(c.counters.tx_bytes));
    Builder::add(ctp, l, static_cast<double>(c.counters.tx_packets));
    Builder::add(crx, l, static_cast<double>(c.counters.rx_bytes));
    Builder::add(cred, l, static_cast<double>(c.counters.redirect_packets));
    Builder::add(segs, l, static_cast<double>(c.tcp.segs_out));
    Builder::add(retr, l, static_cast<double>(c.tcp.retrans_segs));
    Builder::add(rto, l, static_cast<double>(c.tcp.rto_events));
    ClientMetric h;
    h.label = l;
    uint64_t cum = 0;
    // buckets up to 2^26 us (67 s); everything above lands in +Inf
    for (size_t i = 0; i < 26; ++i) {
      cum += c.tcp.rtt_us[i];
      h.histogram.bucket.push_back({cum, std::ldexp(1.0, static_cast<int>(i) + 1) / 1e6});
    }
    h.histogram.bucket.push_back({c.tcp.rtt_samples, std::numeric_limits<double>::infinity()});
    h.histogram.sample_count = c.tcp.rtt_samples;
    h.histogram.sample_sum = static_cast<double>(c.tcp.srtt_us_sum) / 1e6;
    hist.metric.push_back(std::move(h));
  }
  auto& hs = b.family("dualpath_path_health_state",
                      "1 for the path's current health state (up, suspect, down, holddown, "
                      "ramping, drained)",
                      MetricType::Gauge);
  auto& hw = b.family("dualpath_path_health_weight_ratio",
                      "share of its traffic the path may carry (0 failed, ramp step, 1)",
                      MetricType::Gauge);
  auto& hf = b.family("dualpath_path_failures_total", "times the path failed", MetricType::Counter);
  auto& ed = b.family("dualpath_path_evidence_discounted_total",
                      "ticks in which the path's flows had an RTO and retransmitted over 10% "
                      "that data-path evidence did not take for a failure, by why: congested "
                      "(busy and still acknowledged) or peer_queue (inbound at line rate, data "
                      "acknowledged)",
                      MetricType::Counter);
  auto& bs = b.family("dualpath_path_bfd_up", "1 when the path's BFD session is Up, 0 otherwise",
                      MetricType::Gauge);
  auto& pr = b.family("dualpath_path_police_rate_bytes_per_second",
                      "what the classes without a reserve may send on the path while a class "
                      "with one is carried there; 0: not policed",
                      MetricType::Gauge);
  auto& pb = b.family("dualpath_path_policed_bytes_total",
                      "bytes of classes without a reserve dropped to keep the path's reserves",
                      MetricType::Counter);
  auto& pp = b.family("dualpath_path_policed_packets_total",
                      "packets of classes without a reserve dropped to keep the path's reserves",
                      MetricType::Counter);
  for (const auto& p : v.paths) {
    Builder::add(pr, {L("path", p.name)}, static_cast<double>(p.police_rate_bps) / 8);
    Builder::add(pb, {L("path", p.name)}, static_cast<double>(p.policed_bytes));
    Builder::add(pp, {L("path", p.name)}, static_cast<double>(p.policed_packets));
    if (p.health.empty()) continue;
    for (const char* st : {"up", "suspect", "down", "holddown", "ramping", "drained"})
      Builder::add(hs, {L("path", p.name), L("state", st)}, p.health == st ? 1 : 0);
    Builder::add(hw, {L("path", p.name)}, p.weight);
    Builder::add(hf, {L("path", p.name)}, static_cast<double>(p.failures));
    Builder::add(ed, {L("path", p.name), L("reason", "congested")},
                 static_cast<double>(p.discounted_congested));
    Builder::add(ed, {L("path", p.name), L("reason", "peer_queue")},
                 static_cast<double>(p.discounted_peer_queue));
    if (!p.bfd.empty()) Builder::add(bs, {L("path", p.name)}, p.bfd == "up" ? 1 : 0);
  }
  auto& ad =
      b.family("dualpath_all_paths_down",
               "1 when every path is down and the last decisions are kept", MetricType::Gauge);
  Builder::add(ad, {}, v.all_paths_down ? 1 : 0);
  {
    auto& th = b.family("dualpath_tick_seconds",
                        "how long each tick took: measure, plan, write the datapath",
                        MetricType::Histogram);
    ClientMetric h;
    uint64_t cum = 0;
    for (size_t i = 0; i < TickTimes::kBounds.size(); ++i) {
      cum += v.ticks.counts[i];
      h.histogram.bucket.push_back({cum, TickTimes::kBounds[i]});
    }
    h.histogram.bucket.push_back({v.ticks.total, std::numeric_limits<double>::infinity()});
    h.histogram.sample_count = v.ticks.total;
    h.histogram.sample_sum = v.ticks.sum;
    th.metric.push_back(std::move(h));
    auto& ti = b.family("dualpath_tick_interval_seconds", "the policy's [scheduler] tick",
                        MetricType::Gauge);
    Builder::add(ti, {}, v.tick_interval);
  }
  auto& rl = b.family("dualpath_policy_reloads_total",
                      "policy reloads since the daemon started, by result (applied, refused)",
                      MetricType::Counter);
  Builder::add(rl, {L("result", "applied")}, static_cast<double>(v.reloads_applied));
  Builder::add(rl, {L("result", "refused")}, static_cast<double>(v.reloads_refused));
  auto& lr =
      b.family("dualpath_policy_last_reload_successful",
               "0 when the last reload was refused and an older policy runs", MetricType::Gauge);
  Builder::add(lr, {}, v.last_reload_ok ? 1 : 0);
  auto& nb = b.family("dualpath_nccl_transmit_bytes_total",
                      "bytes NCCL plugins sent in a class by a path, by their own count",
                      MetricType::Counter);
  for (const auto& x : v.nccl)
    Builder::add(nb, {L("class", x.klass), L("path", x.path)}, static_cast<double>(x.bytes));
  Builder::add(b.family("dualpath_nccl_processes",
                        "processes whose NCCL plugin reported in the last 30 s", MetricType::Gauge),
               {}, static_cast<double>(v.nccl_processes));
  auto& sw = b.family("dualpath_scheduler_switches_total",
                      "a class's events in dpctl events, by class and kind: the scheduler's "
                      "share changes (latency, spill, return, rebalance, down), an operator's "
                      "pin, an NCCL plugin's moves (nccl), streams or multipath subflows that "
                      "could not carry a decision (streams, multipath)",
                      MetricType::Counter);
  for (const auto& s : v.switches)
    Builder::add(sw, {L("class", s.klass), L("kind", s.kind)}, static_cast<double>(s.count));
  auto& cp = b.family("dualpath_connections_placed_total",
                      "connections (and unconnected UDP sends) of a class placed on a path when "
                      "they were made (separate topology)",
                      MetricType::Counter);
  auto& cu = b.family("dualpath_connections_unmapped_total",
                      "connections of a class left alone at connect time: no rail's network "
                      "holds the destination (separate topology)",
                      MetricType::Counter);
  for (const auto& c : v.connections) {
    if (c.path.empty())
      Builder::add(cu, {L("class", c.klass)}, static_cast<double>(c.count));
    else
      Builder::add(cp, {L("class", c.klass), L("path", c.path)}, static_cast<double>(c.count));
  }
  auto& cr = b.family("dualpath_connections_reset_total",
                      "connections ended because their rail failed (separate topology: they "
                      "cannot move, and reconnect on a rail that works)",
                      MetricType::Counter);
  Builder::add(cr, {}, static_cast<double>(v.connections_reset));
  auto& ho = b.family("dualpath_connections_handed_over_total",
                      "connections addressed to this node on a path where nothing listened, "
                      "handed to the listener bound to the same port on another path "
                      "(separate topology)",
                      MetricType::Counter);
  for (const auto& h : v.handovers)
    Builder::add(ho, {L("path", h.path)}, static_cast<double>(h.count));

  if (v.multipath) {
    auto& sf = b.family("dualpath_multipath_subflows",
                        "subflows of the multipath classes' MPTCP connections now, by rail",
                        MetricType::Gauge);
    for (const auto& s : v.subflows)
      Builder::add(sf, {L("class", s.klass), L("path", s.path)}, static_cast<double>(s.count));
    auto& act = b.family("dualpath_multipath_actions_total",
                         "what the daemon did to multipath connections' subflows: created, "
                         "removed (their rail failed), role (active/backup) changed, or failed",
                         MetricType::Counter);
    Builder::add(act, {L("action", "created")}, static_cast<double>(v.multipath->created));
    Builder::add(act, {L("action", "removed")}, static_cast<double>(v.multipath->removed));
    Builder::add(act, {L("action", "role")}, static_cast<double>(v.multipath->role_changes));
    Builder::add(act, {L("action", "failed")}, static_cast<double>(v.multipath->failed));
    auto& fb = b.family("dualpath_mptcp_fallbacks_total",
                        "MPTCP connections of this network namespace that fell back to TCP "
                        "because the peer answered without MPTCP (the kernel's MIB)",
                        MetricType::Counter);
    Builder::add(fb, {}, static_cast<double>(v.multipath->fallbacks));
  }

  if (v.multipath_ready) {
    auto& ready = b.family("dualpath_multipath_ready",
                           "1 while the policy's multipath classes run; 0 while an MPTCP setting "
                           "they need could not be made (dpctl status names it), and their "
                           "connections keep one subflow",
                           MetricType::Gauge);
    Builder::add(ready, {}, *v.multipath_ready ? 1 : 0);
  }

  // Families without a series are left out (an empty family is not valid exposition).
  std::vector<MetricFamily> out;
  for (auto& f : b.out)
    if (!f.metric.empty()) out.push_back(std::move(f));
  return out;
}

std::string serialize_metrics(const std::vector<MetricFamily>& families) {
  std::ostringstream os;
  prometheus::TextSerializer().Serialize(os, families);
  return os.str();
}

}  // namespace dp

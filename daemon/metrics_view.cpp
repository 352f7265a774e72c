// SPDX-License-Identifier: Apache-2.0
#include "metrics_view.h"

#include "dualpath/version.h"

namespace dp {

namespace {

// Per path: its health, BFD, policing and measurements; and per path, per
// class (the unclassified included): its counters and shares.
void metrics_paths(const Node& n, MetricsView& v) {
  const Policy& pol = n.policy();
  const NodeState& st = n.state();
  const Datapath& dpath = n.datapath();
  const auto& counters = n.measurements().counters();
  const auto& tcp = n.measurements().tcp();
  const auto drops = dpath.police_drops();
  for (size_t i = 0; i < pol.paths.size(); ++i) {
    auto slot = dpath.rail_slot(i);
    MetricsView::Path p;
    p.name = pol.paths[i].name;
    p.capacity_bps = pol.paths[i].capacity_bps;
    p.measure = n.measurements().measure(i);
    p.exceptions = n.measurements().exceptions()[slot];
    const auto& h = n.controller().health(i);
    p.health = to_string(h.state());
    p.weight = h.weight();
    p.failures = h.failures();
    p.discounted_congested = n.controller().discounted(i).congested;
    p.discounted_peer_queue = n.controller().discounted(i).peer_queue;
    if (auto b = n.monitor().bfd(i)) p.bfd = bfd::to_string(b->session->state());
    if (i < st.police.size()) p.police_rate_bps = st.police[i].rate_bps;
    if (i < drops.size()) {
      p.policed_packets = drops[i].packets;
      p.policed_bytes = drops[i].bytes;
    }
    v.paths.push_back(std::move(p));
    for (size_t c = 0; c <= pol.classes.size(); ++c) {
      bool unclassified = c == pol.classes.size();
      auto cslot = unclassified ? DP_CLASS_UNCLASSIFIED : dpath.class_slot(c);
      v.classes.push_back({pol.paths[i].name, unclassified ? "unclassified" : pol.classes[c].name,
                           counters[slot][cslot], tcp[slot][cslot], std::nullopt, std::nullopt});
      if (unclassified) continue;
      const Shares w = n.decided_shares(c);
      if (i < w.size()) v.classes.back().decided = static_cast<double>(w[i]) / DP_SHARE_SCALE;
      if (auto k = st.carried.carried(c); k && i < k->share.size())
        v.classes.back().carried = static_cast<double>(k->share[i]) / DP_SHARE_SCALE;
    }
  }
}

// The separate topology's connections placed per path and class, and the
// ones handed over to another path.
void metrics_connections(const Node& n, MetricsView& v) {
  const Policy& pol = n.policy();
  const Datapath& dpath = n.datapath();
  auto conns = dpath.connects();
  for (size_t c = 0; c < pol.classes.size(); ++c) {
    auto cslot = dpath.class_slot(c);
    for (size_t i = 0; i < pol.paths.size(); ++i)
      v.connections.push_back(
          {pol.paths[i].name, pol.classes[c].name, conns[dpath.rail_slot(i)][cslot]});
    v.connections.push_back({"", pol.classes[c].name, conns[DP_CONNECT_UNMAPPED][cslot]});
  }
  auto handed = dpath.handovers();
  for (size_t i = 0; i < pol.paths.size(); ++i)
    v.handovers.push_back({pol.paths[i].name, "", handed[dpath.rail_slot(i)]});
}

// MPTCP: the subflows of each multipath class per path, and the path
// manager's counters.
void metrics_multipath(const Node& n, MetricsView& v) {
  const Policy& pol = n.policy();
  auto per = n.multipath().subflows_per_path();
  for (size_t c = 0; c < pol.classes.size() && c < per.size(); ++c) {
    if (!pol.classes[c].multipath) continue;
    for (size_t i = 0; i < pol.paths.size(); ++i)
      v.subflows.push_back({pol.paths[i].name, pol.classes[c].name, per[c][i]});
  }
  const auto& k = n.multipath().counters();
  v.multipath = MetricsView::Multipath{k.created, k.removed, k.role_changes, k.failed,
                                       Multipath::kernel_fallbacks()};
}

}  // namespace

MetricsView metrics_view(const Node& n) {
  const Policy& pol = n.policy();
  const NodeState& st = n.state();
  MetricsView v;
  v.version = kVersion;
  v.node = pol.node;
  v.policy_file = pol.file;
  v.policy_hash = pol.hash;
  v.cluster = pol.cluster;
  v.group = pol.group;
  v.group_hash = pol.group_hash;
  v.reloads_applied = st.reloads_applied;
  v.reloads_refused = st.reloads_refused;
  v.last_reload_ok = st.last_reload_ok;
  metrics_paths(n, v);
  for (auto& [key, count] : n.events().switches())
    v.switches.push_back({key.first, key.second, count});
  for (auto& [key, bytes] : st.nccl.totals()) v.nccl.push_back({key.first, key.second, bytes});
  v.nccl_processes = st.nccl.reporting(std::chrono::steady_clock::now());
  if (pol.topology == Topology::Separate) metrics_connections(n, v);
  v.connections_reset = st.connections_reset;
  if (n.multipath().running()) metrics_multipath(n, v);
  if (pol.has_multipath()) v.multipath_ready = st.multipath_error.empty();
  v.all_paths_down = n.controller().all_down();
  v.ticks = st.tick_times;
  v.tick_interval = std::chrono::duration<double>(pol.scheduler.tick).count();
  return v;
}

}  // namespace dp

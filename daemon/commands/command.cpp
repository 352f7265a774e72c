// SPDX-License-Identifier: Apache-2.0
// What the commands of several objects share, and the list of every command.
#include "command.h"

#include <fstream>
#include <sstream>

#include "dualpath/core/views.h"

namespace dp {

std::vector<Command> all_commands(Node& n) {
  std::vector<Command> all;
  for (auto&& object : {status_commands(n), path_commands(n), class_commands(n), flow_commands(n),
                        events_commands(n), policy_commands(n), nccl_commands(n)})
    all.insert(all.end(), object.begin(), object.end());
  return all;
}

json health_json(const Node& n, size_t path) {
  auto bfd = n.monitor().bfd(path);
  json h = render_health(n.controller().health(path), bfd ? &*bfd : nullptr, SchedClock::now());
  const auto& d = n.controller().discounted(path);
  h["evidence_discounted"] = {{"congested", d.congested}, {"peer_queue", d.peer_queue}};
  return h;
}

json paths_json(const Node& n) {
  const Policy& pol = n.policy();
  json out = json::array();
  const auto& counters = n.measurements().counters();
  for (size_t i = 0; i < pol.paths.size(); ++i) {
    const auto& ps = pol.paths[i];
    size_t slot = n.datapath().rail_slot(i);
    PathView v;
    v.spec = &ps;
    v.slot = static_cast<int>(slot);
    for (size_t c = 0; c < DP_MAX_CLASSES; ++c) {
      const auto& x = counters[slot][c];
      v.sum.tx_bytes += x.tx_bytes;
      v.sum.tx_packets += x.tx_packets;
      v.sum.rx_bytes += x.rx_bytes;
      v.sum.rx_packets += x.rx_packets;
      v.sum.redirect_packets += x.redirect_packets;
      v.sum.redirect_bytes += x.redirect_bytes;
    }
    v.ifindex = static_cast<int>(n.datapath().ifindex_of(ps.interface));
    if (v.ifindex) v.tc = n.datapath().tc(v.ifindex);
    v.exceptions = n.measurements().exceptions()[slot];
    v.measure = n.measurements().measure(i);
    v.rdma_devices = n.measurements().rdma_devices(i);
    v.datapath_tx_bps = n.measurements().datapath_tx_bps(slot);
    v.present = n.datapath().present(i);
    v.health = health_json(n, i);
    out.push_back(render_path(v, Clock::now()));
  }
  return out;
}

json policy_disk_hash(const Node& n) {
  std::ifstream in(n.policy().file, std::ios::binary);
  if (!in) return nullptr;
  std::stringstream disk;
  disk << in.rdbuf();
  return content_hash(disk.str());
}

Result<void> place(Node& n, size_t klass, size_t path, bool operator_pin) {
  auto w = n.controller().place(klass, path, operator_pin);
  DP_TRY(n.datapath().write_decision(w.klass, w.shares, w.flags));
  n.controller().placed(klass, path, operator_pin);
  n.settle();
  return {};
}

}  // namespace dp

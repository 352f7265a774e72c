// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/measure.h"

#include "dualpath/core/units.h"

namespace dp {

PathMeasure::PathMeasure(uint64_t capacity_bps, double ewma_weight, Nanos window)
    : capacity_bps_(capacity_bps),
      window_(window),
      tx_(ewma_weight),
      rx_(ewma_weight),
      dp_tx_(ewma_weight),
      rdma_tx_(ewma_weight),
      rdma_rx_(ewma_weight),
      rtt_(window),
      ls_rtt_(window),
      loss_(window) {}

void PathMeasure::update(const PathSnapshot& s) {
  tx_.update(s.link.tx_bytes, s.t);
  rx_.update(s.link.rx_bytes, s.t);
  dp_tx_.update(s.dp_tx_bytes, s.t);
  if (s.rdma) {
    rdma_tx_.update(s.rdma->tx_bytes, s.t);
    rdma_rx_.update(s.rdma->rx_bytes, s.t);
  }
  rtt_.update(s.tcp.rtt_us, s.t);
  ls_rtt_.update(s.ls_rtt_us, s.t);
  loss_.update(s.tcp.retrans_segs, s.tcp.segs_out, s.t);
  snaps_.push_back(s);
  while (snaps_.size() > 2 && snaps_[1].t <= s.t - window_) snaps_.pop_front();
  reconcile();
}

double PathMeasure::utilisation() const {
  if (!capacity_bps_) return 0;
  return (tx_bps() + rdma_tx_bps()) / static_cast<double>(capacity_bps_);
}

double PathMeasure::tick_utilisation() const {
  if (!capacity_bps_) return 0;
  return (tx_.last_rate() + rdma_tx_.last_rate()) * 8 / static_cast<double>(capacity_bps_);
}

void PathMeasure::reconcile() {
  rec_ = {};
  if (snaps_.size() < 2) return;
  const auto& a = snaps_.front();
  const auto& b = snaps_.back();
  if (b.dp_tx_bytes < a.dp_tx_bytes || b.link.tx_bytes < a.link.tx_bytes) return;  // reset
  rec_.datapath_bytes = b.dp_tx_bytes - a.dp_tx_bytes;
  rec_.link_bytes = b.link.tx_bytes - a.link.tx_bytes;
  rec_.link_dropped = b.link.tx_dropped - a.link.tx_dropped;
  rec_.window = std::chrono::duration_cast<Nanos>(b.t - a.t);
  uint64_t hi = std::max(rec_.datapath_bytes, rec_.link_bytes);
  uint64_t lo = std::min(rec_.datapath_bytes, rec_.link_bytes);
  double diff = hi ? static_cast<double>(hi - lo) / static_cast<double>(hi) : 0;
  if (hi < kReconcileMinBytes || diff <= kReconcileTolerance) {
    disagree_since_.reset();
    return;
  }
  if (!disagree_since_) disagree_since_ = b.t;
  if (b.t - *disagree_since_ < kReconcilePersist) return;
  rec_.agree = false;
  double secs = std::chrono::duration<double>(rec_.window).count();
  if (rec_.datapath_bytes > rec_.link_bytes)
    rec_.explanation = fmt::format(
        "over the last {:.1f}s the datapath counted {} more than the link sent ({:.0f}%): the "
        "qdisc dropped or is still queueing them ({} packets dropped on transmit)",
        secs, format_bytes(static_cast<double>(hi - lo)), diff * 100, rec_.link_dropped);
  else
    rec_.explanation = fmt::format(
        "over the last {:.1f}s the link sent {} more than the datapath saw ({:.0f}%): traffic "
        "that bypasses tc egress (XDP_TX, AF_XDP, a packet socket) or a detached program",
        secs, format_bytes(static_cast<double>(hi - lo)), diff * 100);
}

}  // namespace dp

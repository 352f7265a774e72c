// SPDX-License-Identifier: Apache-2.0
// Per-path measurement: what the daemon knows about each rail, from three
// sources (the datapath's counters, the kernel's link statistics, RDMA port
// counters) and how they are turned into rates, utilisation, RTT percentiles
// and loss. PathMeasure is pure (time and counters are passed in); LinkStats
// are read with libnl (kernel/linkstats.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "dualpath/core/estimators.h"
#include "dualpath/core/result.h"

namespace dp {

struct LinkStats {
  uint64_t tx_bytes = 0, rx_bytes = 0, tx_packets = 0, rx_packets = 0;
  uint64_t tx_dropped = 0, rx_dropped = 0, tx_errors = 0, rx_errors = 0;
  bool oper_up = false;
};

// TCP figures of one rail (or one rail and class), cumulative, from sockops.
struct TcpCounters {
  Histogram rtt_us{};  // log2 buckets of smoothed RTT samples, microseconds
  uint64_t rtt_samples = 0;
  uint64_t srtt_us_sum = 0;
  uint64_t segs_out = 0;      // data segments sent
  uint64_t retrans_segs = 0;  // retransmitted segments
  uint64_t rto_events = 0;
};

// RDMA port counters of the device(s) on one rail, cumulative, in bytes.
struct RdmaCounters {
  uint64_t tx_bytes = 0, rx_bytes = 0, tx_packets = 0, rx_packets = 0;
  uint64_t cnp_sent = 0, cnp_handled = 0, ecn_marked = 0;
  uint64_t out_of_sequence = 0, seq_errors = 0, local_ack_timeouts = 0;
};

// The datapath and the link must agree about what a rail sent. When both saw
// at least kReconcileMinBytes in the window and differ by more than
// kReconcileTolerance, the difference is reported with its likely cause.
// A difference must also persist for kReconcilePersist: bytes counted at tc
// egress sit in the qdisc for a moment before the link counts them, so the
// start of a burst always "disagrees" briefly.
inline constexpr double kReconcileTolerance = 0.05;
inline constexpr uint64_t kReconcileMinBytes = 1'000'000;
inline constexpr Nanos kReconcilePersist = std::chrono::seconds(1);

struct Reconciliation {
  bool agree = true;
  uint64_t datapath_bytes = 0, link_bytes = 0, link_dropped = 0;
  Nanos window{0};
  std::string explanation;  // empty when they agree
};

struct PathSnapshot {
  Clock::time_point t;
  uint64_t dp_tx_bytes = 0, dp_rx_bytes = 0;
  LinkStats link;
  std::optional<RdmaCounters> rdma;
  TcpCounters tcp;
  Histogram ls_rtt_us{};  // RTT samples of latency-sensitive classes only
};

class PathMeasure {
 public:
  PathMeasure(uint64_t capacity_bps, double ewma_weight, Nanos window);
  void update(const PathSnapshot& s);

  // bits per second, smoothed
  double tx_bps() const { return tx_.rate() * 8; }
  double rx_bps() const { return rx_.rate() * 8; }
  double rdma_tx_bps() const { return rdma_tx_.rate() * 8; }
  double rdma_rx_bps() const { return rdma_rx_.rate() * 8; }
  // The rail's load: what the link sent plus RDMA traffic that bypasses it,
  // over capacity.
  double utilisation() const;
  // Of the newest tick alone (the scheduler decides on peaks of these).
  double tick_utilisation() const;
  Nanos rate_window() const { return tx_.window(); }
  std::optional<Percentiles> rtt_us() const { return rtt_.percentiles(); }
  // What latency-sensitive traffic saw on this rail (the scheduler's signal):
  // bulk flows' queueing delay is not what a control RPC would see.
  std::optional<Percentiles> ls_rtt_us() const { return ls_rtt_.percentiles(); }
  std::optional<Ratio> loss() const { return loss_.ratio(); }
  const Reconciliation& reconciliation() const { return rec_; }
  const PathSnapshot& latest() const { return snaps_.back(); }
  bool has_sample() const { return !snaps_.empty(); }

 private:
  void reconcile();

  uint64_t capacity_bps_;
  Nanos window_;
  RateEstimator tx_, rx_, dp_tx_, rdma_tx_, rdma_rx_;
  WindowedHistogram rtt_, ls_rtt_;
  WindowedRatio loss_;
  std::deque<PathSnapshot> snaps_;
  Reconciliation rec_;
  std::optional<Clock::time_point> disagree_since_;
};

}  // namespace dp

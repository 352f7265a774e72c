// SPDX-License-Identifier: Apache-2.0
// What the daemon measures each tick: the datapath's per-rail, per-class
// counters and TCP figures (through Datapath), the kernel's link statistics,
// and RDMA port counters; turned into each path's PathMeasure (rates,
// utilisation, RTT percentiles, loss) and what the controller's tick needs.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dualpath/core/controller.h"
#include "dualpath/core/measure.h"
#include "dualpath/core/policy.h"
#include "dualpath/kernel/datapath.h"
#include "dualpath/kernel/linkstats.h"
#include "dualpath/kernel/rdma.h"

namespace dp {

class Measurements {
 public:
  Measurements();
  // A policy's paths: each gets a fresh PathMeasure; RDMA ports are found anew.
  void reset(const Policy& p);
  // Reads everything once; `tick` counts the daemon's ticks.
  void collect(const Policy& p, const Datapath& dp, uint64_t tick);
  // What the controller's tick needs from it.
  TickInput tick_input(const Policy& p, const Datapath& dp) const;

  const CounterTable& counters() const { return counters_; }
  const TcpTable& tcp() const { return tcp_; }
  const ExceptionTable& exceptions() const { return exceptions_; }
  double datapath_tx_bps(size_t rail_slot) const { return tx_bps_[rail_slot]; }
  const PathMeasure* measure(size_t path) const {
    return path < measures_.size() ? &measures_[path] : nullptr;
  }
  std::vector<std::string> rdma_devices(size_t path) const {
    return path < rdma_by_path_.size() ? rdma_by_path_[path] : std::vector<std::string>{};
  }
  // The RDMA ports whose netdev is this interface.
  std::vector<RdmaPort> rdma_ports(const std::string& interface) const {
    std::vector<RdmaPort> out;
    for (auto& port : rdma_ports_)
      if (port.netdev == interface) out.push_back(port);
    return out;
  }
  // Each path's median RTT when it has at least 10 samples (the flowlet gap).
  std::vector<std::optional<double>> rtt_p50_us() const;

 private:
  void discover_rdma_ports(const Policy& p, bool quiet);
  void measure_paths(const Policy& p, const Datapath& dp, uint64_t tick);

  std::chrono::steady_clock::time_point last_{};
  bool first_ = true;
  CounterTable counters_{};
  TcpTable tcp_{};
  ExceptionTable exceptions_{};
  std::array<double, DP_MAX_RAILS> tx_bps_{}, rx_bps_{};
  std::unique_ptr<LinkStatsReader> links_;
  std::vector<PathMeasure> measures_;                   // per policy path
  std::vector<bool> disagreeing_;                       // per policy path: reconciliation reported
  std::vector<RdmaPort> rdma_ports_;                    // ports whose netdev is a path's interface
  std::vector<std::vector<std::string>> rdma_by_path_;  // device names per policy path
};

}  // namespace dp

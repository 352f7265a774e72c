// SPDX-License-Identifier: Apache-2.0
// Prometheus metrics. build_metrics() is pure: it turns a view of the
// daemon's state into metric families named by Prometheus conventions
// (base units, _total for counters, labels path and class). The exporter
// serves the newest families over HTTP with prometheus-cpp.
#pragma once

#include <prometheus/metric_family.h>

#include <array>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/abi.h"
#include "dualpath/core/measure.h"
#include "dualpath/core/result.h"

namespace dp {

// How long the daemon's ticks take (measure, plan, write the datapath),
// since it started: dualpath_tick_seconds. A tick that takes a good part of
// its interval delays BFD and the next decisions.
struct TickTimes {
  static constexpr std::array<double, 10> kBounds{0.0005, 0.001, 0.002, 0.005, 0.01,
                                                  0.02,   0.05,  0.1,   0.25,  1.0};
  std::array<uint64_t, kBounds.size()> counts{};  // ticks of each bucket (not cumulative)
  uint64_t total = 0;
  double sum = 0, last = 0;
  void record(double seconds);
};

struct MetricsView {
  std::string version, node, policy_file, policy_hash;
  std::string cluster, group, group_hash;  // from a rendered policy (dualpath-cluster(5))
  struct Path {
    std::string name;
    uint64_t capacity_bps = 0;
    const PathMeasure* measure = nullptr;  // null until the first sample
    std::array<uint64_t, DP_EXC_MAX> exceptions{};
    std::string health;  // RailState name ("" = unknown)
    double weight = 1;   // share of its traffic the path may carry
    uint64_t failures = 0;
    std::string bfd;  // BFD session state, "" when off
    // reserves (core/police.h): the rate the classes without one are held
    // to on the path (0: not policed), and what the policer dropped
    uint64_t police_rate_bps = 0;
    uint64_t policed_packets = 0, policed_bytes = 0;
    // RTO ticks data-path evidence did not take for a failure (Controller::Discounted)
    uint64_t discounted_congested = 0, discounted_peer_queue = 0;
  };
  bool all_paths_down = false;
  // policy reloads (SIGHUP, dpctl policy reload/apply/rollback) since start
  uint64_t reloads_applied = 0, reloads_refused = 0;
  bool last_reload_ok = true;
  struct Class {
    std::string path, klass;  // klass "unclassified" for the unclassified slot
    dp_counters counters{};
    TcpCounters tcp;
    // the class's decided share on the path, and what the path carried of
    // it under that decision (CarriedShares; 0..1, nullopt: none)
    std::optional<double> decided, carried;
  };
  std::vector<Path> paths;
  std::vector<Class> classes;
  struct Switch {
    std::string klass, kind;
    uint64_t count = 0;
  };
  std::vector<Switch> switches;  // scheduler moves by class and reason
  // what NCCL plugins sent per class and path, by their count (nccl.report),
  // and how many processes reported in the last 30 s
  struct Nccl {
    std::string klass, path;
    uint64_t bytes = 0;
  };
  std::vector<Nccl> nccl;
  uint64_t nccl_processes = 0;
  // separate topology: connections placed at connect time (path "" = left
  // alone, no rail's network holds the destination), and connections ended
  // on failed rails
  struct Connections {
    std::string path, klass;
    uint64_t count = 0;
  };
  std::vector<Connections> connections;
  uint64_t connections_reset = 0;
  // separate topology: connections addressed to this node on a path where
  // nothing listened, handed to the listener on another path (klass unused)
  std::vector<Connections> handovers;
  // multipath classes: subflows now by class and path, and what was done
  std::vector<Connections> subflows;
  struct Multipath {
    uint64_t created = 0, removed = 0, role_changes = 0, failed = 0;
    uint64_t fallbacks = 0;  // the namespace's MPTCP connections that fell back to TCP
  };
  std::optional<Multipath> multipath;  // nullopt: no multipath class
  // Whether the multipath classes run: false while an MPTCP setting could not
  // be made (NodeState::multipath_error); nullopt: no multipath class.
  std::optional<bool> multipath_ready;
  TickTimes ticks;
  double tick_interval = 0;  // seconds: the policy's [scheduler] tick
};

std::vector<prometheus::MetricFamily> build_metrics(const MetricsView& v);
// dualpath_metrics_age_seconds: how long ago the daemon's loop published the
// families a scrape gets, measured by the exporter when it is scraped, so
// that it keeps growing when the loop hangs and the exporter still answers.
prometheus::MetricFamily metrics_age_family(double seconds);
// The text exposition format of the families (what /metrics serves).
std::string serialize_metrics(const std::vector<prometheus::MetricFamily>& families);

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
// The adaptive scheduler: a deterministic function of (policy, per-rail
// estimates, per-class demand, health, time, previous state) that returns,
// per class, the share of new flowlets each rail receives, and a reason for
// every change. No I/O: the daemon feeds it each tick and writes the result
// to the decision map; tests replay recorded traces through it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/policy.h"

namespace dp {

using SchedClock = std::chrono::steady_clock;

struct RailInput {
  bool healthy = true;
  double utilisation = 0;        // of the newest tick alone: 0..1 (above when over capacity)
  std::optional<double> rtt_us;  // p50 over the measurement window, if known
};

struct SchedulerInput {
  SchedClock::time_point now;
  std::vector<RailInput> rails;       // per policy path
  std::vector<double> demand_bps;     // per policy class: its transmit rate in the newest tick
  std::vector<bool> operator_pinned;  // per policy class: pinned with dpctl class set
};

// Shares in units of 1/10000 (DP_SHARE_SCALE), per policy path; they sum to
// 10000 whenever any rail is healthy.
using Shares = std::vector<uint16_t>;

// The highest of the samples of a sliding window: per-tick demand and
// utilisation, so that an 80 ms burst train is seen at its peaks, not at the
// mean a long EWMA makes of it.
class PeakWindow {
 public:
  // Adds a sample and forgets those older than `keep`.
  void add(SchedClock::time_point t, double v, SchedClock::duration keep);
  // The highest sample newer than now - window (0 if none).
  double peak(SchedClock::time_point now, SchedClock::duration window) const;
  bool operator==(const PeakWindow&) const = default;

 private:
  std::deque<std::pair<SchedClock::time_point, double>> samples_;
};

struct ClassState {
  Shares shares;
  std::optional<SchedClock::time_point> last_change;
  PeakWindow demand;  // bits per second, per tick
};

struct SchedulerState {
  std::vector<ClassState> classes;  // per policy class
  std::vector<PeakWindow> rails;    // utilisation per tick, per policy path
};

struct SchedulerEvent {
  SchedClock::time_point t;
  std::string klass;  // "" for an event of a path's health
  Shares before, after;
  std::string kind;    // "latency", "spill", "return", "rebalance", "down"
  std::string reason;  // a sentence with the numbers that decided it
  std::string path;    // the path, for a health event
};

struct SchedulerResult {
  SchedulerState state;
  std::vector<SchedulerEvent> events;
};

// Every class whole on its preferred rail.
SchedulerState initial_state(const Policy& p);

SchedulerResult schedule(const Policy& p, const SchedulerInput& in, const SchedulerState& prev);

// "rail0 70%, rail1 30%"
std::string format_shares(const Policy& p, const Shares& s);

// The flowlet gap the datapath should use: the policy's, or the difference
// between the rails' median RTTs when that is longer (a flowlet re-placed onto
// a faster rail must not overtake the one before it on a slower rail), at most
// kMaxFlowletGap. PathMonitor without an RTT do not count; a policy gap of 0 (no
// flowlets) stays 0.
constexpr std::chrono::nanoseconds kMaxFlowletGap = std::chrono::milliseconds(8);
std::chrono::nanoseconds effective_flowlet_gap(
    std::chrono::nanoseconds policy_gap, const std::vector<std::optional<double>>& rtt_p50_us);

}  // namespace dp

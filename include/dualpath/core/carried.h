// SPDX-License-Identifier: Apache-2.0
// What each path carried of a class against what its decision gave it: the
// shares of the class's bytes since the decision took effect, over at most
// the last minute. A decision the datapath does not carry out (a stream no
// gap moves, connections placed before the decision) shows here, in
// dpctl class list and in the metrics (the DualpathDecisionNotCarried
// alert). No I/O: the daemon feeds it every tick.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace dp {

class CarriedShares {
 public:
  using Clock = std::chrono::steady_clock;
  // Too few bytes say nothing about shares: below this no carried share.
  static constexpr uint64_t kMinBytes = 1 << 20;
  static constexpr std::chrono::seconds kWindow{60};

  struct Carried {
    std::vector<uint16_t> share;  // per policy path, DP_SHARE_SCALE in all
    uint64_t bytes = 0;           // what they are shares of
    double seconds = 0;           // over how long
  };

  // Each tick: per policy class, its decided shares and what each policy
  // path sent of it so far (cumulative counters). A decision that moves a
  // share by more than 5 points starts the count again; smaller steps (a
  // spill's share following the load) are the same decision.
  void observe(const std::vector<std::vector<uint16_t>>& decided,
               const std::vector<std::vector<uint64_t>>& tx, Clock::time_point now);
  // nullopt until the class has sent kMinBytes under its decision.
  std::optional<Carried> carried(size_t klass) const;

 private:
  struct Sample {
    Clock::time_point t;
    std::vector<uint64_t> tx;
  };
  struct Class {
    std::vector<uint16_t> decided;
    std::deque<Sample> samples;  // one a second at most; the first is the baseline
  };
  std::vector<Class> classes_;
};

}  // namespace dp

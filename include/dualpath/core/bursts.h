// SPDX-License-Identifier: Apache-2.0
// Burst placement ([scheduler] placement = "bursts"): where each flow of a
// split elastic class sends its next burst, so that a round of bursts (the
// expert dispatch of one MoE step, say) finishes as soon as it can on all
// rails together. The datapath measures every flow's bursts and moves a flow
// only where a burst begins (abi.h, DP_CELL_F_BURSTS); this is the plan it
// follows. No I/O: the daemon feeds it every tick.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "dualpath/abi.h"

namespace dp {

// A flow of a class placed by bursts, as the datapath measured it.
struct BurstFlow {
  size_t klass = 0;    // policy class
  size_t path = 0;     // policy path its bursts go out on now (BurstPlan::kNone: none)
  uint64_t burst = 0;  // bytes its next burst is expected to carry
};

struct PlannedFlow {
  dp_flow_key key{};
  BurstFlow flow;
};

struct BurstPlan {
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::vector<size_t> path;      // per flow: where its next burst goes (kNone: nowhere planned)
  std::vector<double> finish_s;  // per path: how long its planned bursts take there
};

// Classes by priority, highest first (a lower-priority class's bursts never
// push a higher one's off its best rail); in a class, largest burst first,
// each on the path the class may use where it would finish first, given the
// bursts planned there before it and the capacity the path has left
// (left_bps, bits per second, per policy path; 0: none). A flow keeps its
// path when that finishes within 5% of the best (no move for nothing).
// `allowed` and `priority` are per policy class; `allowed` per policy path.
BurstPlan plan_bursts(const std::vector<BurstFlow>& flows,
                      const std::vector<std::vector<bool>>& allowed,
                      const std::vector<int>& priority, const std::vector<double>& left_bps);

// What each flow's next burst is planned for: the largest burst it sent
// lately, each counting half as much for every `half_life` since it was
// seen, rather than the last one alone. The transport cuts a burst in two
// where it pauses longer than the burst gap with data still queued (for
// ACKs, the reader's window, pacing); the datapath then reads the part
// after the pause as the flow's last burst, and a plan made for that part
// puts the flow's next whole burst on a rail for a fraction of it.
class BurstSizes {
 public:
  using Clock = std::chrono::steady_clock;
  using Key = std::array<uint8_t, sizeof(dp_flow_key)>;

  explicit BurstSizes(std::chrono::nanoseconds half_life) : half_life_(half_life) {}

  // The size to plan `key`'s next burst for, given what the datapath
  // measured now; remembers it.
  uint64_t expect(const dp_flow_key& key, uint64_t measured, Clock::time_point now);
  // Forgets flows not measured for 16 half-lives (their memory is below a
  // 65,000th of what it was: the measurement alone counts).
  void forget_idle(Clock::time_point now);
  // What the last expect() for `key` returned, if the flow is remembered.
  std::optional<uint64_t> last(const dp_flow_key& key) const;
  size_t size() const { return seen_.size(); }

 private:
  struct Seen {
    double bytes = 0;  // as of `at`
    Clock::time_point at;
  };
  std::chrono::nanoseconds half_life_;
  std::map<Key, Seen> seen_;
};

// The daemon's half-life: a whole burst still counts for a third of itself
// when it recurs 500 ms later, and a flow whose bursts shrank is planned for
// what it sends now within about a second.
inline constexpr std::chrono::milliseconds kBurstHalfLife{300};

}  // namespace dp

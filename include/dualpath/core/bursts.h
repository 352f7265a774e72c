// SPDX-License-Identifier: Apache-2.0
// Burst placement ([scheduler] placement = "bursts"): where each flow of a
// split elastic class sends its next burst, so that a round of bursts (the
// expert dispatch of one MoE step, say) finishes as soon as it can on all
// rails together. The datapath measures every flow's bursts and moves a flow
// only where a burst begins (abi.h, DP_CELL_F_BURSTS); this is the plan it
// follows. No I/O: the daemon feeds it every tick.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
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

}  // namespace dp

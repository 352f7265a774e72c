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
  uint32_t bursts = 0;  // its burst number (dp_flow.flowlet)
  uint64_t bytes = 0;   // all it sent
  uint8_t flags = 0;    // dp_flow.flags
};

struct BurstPlan {
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::vector<size_t> path;      // per flow: where its next burst goes (kNone: nowhere planned)
  std::vector<double> finish_s;  // per path: how long its planned bursts take there
  std::vector<bool> stream;      // per flow: a stream (StreamPlanner), moved at once
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

// ---- streams

// A stream is a bulk transfer (parameter or KV-cache sync, a checkpoint,
// weights loading): a flow that has sent at every look for kStreamAfter and,
// at every look, was in the same burst as at the last (no gap) or in a burst
// that outgrew its plan (the socket always holds more than the plan was
// for). Burst placement cannot place it: a stream without gaps never begins
// the next burst a plan is for, and one whose transport makes gaps always
// outgrows its plan and goes to the class's main rail. So a stream is
// placed by the number of streams each rail carries instead, and the
// datapath moves it wherever it is in its bursts (abi.h, DP_PLAN_F_STREAM).
inline constexpr std::chrono::milliseconds kStreamAfter{500};
// A stream that sent nothing for this long is not streaming now.
inline constexpr std::chrono::milliseconds kStreamStalled{200};

class Streams {
 public:
  using Clock = BurstSizes::Clock;
  struct Sample {
    bool stream = false;
    double bps = 0;  // what it sends, bits a second (smoothed over about 250 ms)
  };
  // `burst` is the flow's burst number (dp_flow.flowlet), `bytes` all it
  // sent (dp_flow.bytes) and `flags` dp_flow.flags, as measured `now`.
  Sample observe(const dp_flow_key& key, uint32_t burst, uint64_t bytes, uint8_t flags,
                 Clock::time_point now);
  // Forgets flows not observed for two seconds.
  void forget_idle(Clock::time_point now);
  size_t size() const { return seen_.size(); }

 private:
  struct Seen {
    uint32_t burst = 0;
    uint64_t bytes = 0;
    Clock::time_point since, progress, at;  // bulk since, last byte counted, observed
    double bps = 0;
  };
  std::map<BurstSizes::Key, Seen> seen_;
};

struct StreamFlow {
  dp_flow_key key{};
  size_t klass = 0;
  size_t path = BurstPlan::kNone;  // policy path it goes out on now
  double bps = 0;
};

struct StreamPlan {
  std::vector<size_t> path;  // per stream: where it goes (BurstPlan::kNone: no plan)
  // A class whose streams, settled, carry more than 5 points away from its
  // decision on some path: said once per decision, for the event log.
  struct Shortfall {
    size_t klass = 0;
    size_t streams = 0;
    std::vector<uint16_t> carried;  // per policy path, DP_SHARE_SCALE in all
  };
  std::vector<Shortfall> shortfalls;
};

// Streams of a class split over its rails in the proportions of its decided
// shares, by count (largest remainder; every rail with a share gets one
// while there are enough). Elastic streams that fill their rails then carry
// the rails' capacities, which is what a spill decides; streams of a fixed
// rate carry their count's share. A stream keeps the rail it was planned for
// while the counts hold, and a class's streams move at most once a second.
class StreamPlanner {
 public:
  using Clock = BurstSizes::Clock;
  // `decided`: per policy class, per policy path, its decided share
  // (DP_SHARE_SCALE in all; empty for a class not planned).
  StreamPlan plan(const std::vector<StreamFlow>& streams,
                  const std::vector<std::vector<uint16_t>>& decided, Clock::time_point now);

 private:
  struct ClassState {
    Clock::time_point since;      // its streams were first planned
    Clock::time_point moved{};    // its streams last moved
    std::vector<uint16_t> noted;  // the decision last said not carried
  };
  std::map<BurstSizes::Key, size_t> planned_;
  std::map<size_t, ClassState> classes_;
};

// How many of `n` streams each path carries for the shares `decided`
// (largest remainder; each path with a share gets at least one while n is
// at least the number of such paths).
std::vector<size_t> stream_counts(size_t n, const std::vector<uint16_t>& decided);

}  // namespace dp

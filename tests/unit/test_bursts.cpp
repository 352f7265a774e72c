// SPDX-License-Identifier: Apache-2.0
// Burst placement's plan (core/bursts.cpp): where each flow's next burst
// goes, so that a round of bursts finishes soonest on all rails together.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "dualpath/core/bursts.h"

namespace dp {
namespace {

constexpr uint64_t KiB = 1024;
const std::vector<std::vector<bool>> kBoth{{true, true}};
const std::vector<int> kOnePriority{0};

// One MoE step's dispatch on four connections, skewed by expert popularity
// (1/rank): 1.92, 0.96, 0.64 and 0.48 MiB.
std::vector<BurstFlow> skewed_step() {
  return {{0, 0, 1966 * KiB}, {0, 0, 983 * KiB}, {0, 0, 655 * KiB}, {0, 0, 492 * KiB}};
}

double makespan(const BurstPlan& p) {
  return *std::max_element(p.finish_s.begin(), p.finish_s.end());
}

TEST(Bursts, ARoundOfSkewedBurstsFinishesTogetherOnUnequalRails) {
  // 1 Gbit and 250 Mbit: all four on rail0 take 33.5 ms; the 0.64 MiB burst
  // on rail1 (21 ms) leaves rail0 28.2 ms: the best a whole-burst split does
  auto plan = plan_bursts(skewed_step(), kBoth, kOnePriority, {1e9, 250e6});
  EXPECT_EQ(plan.path, (std::vector<size_t>{0, 0, 1, 0}));
  EXPECT_NEAR(makespan(plan) * 1e3, 28.2, 0.2);
  EXPECT_LT(plan.finish_s[1], plan.finish_s[0]);
}

TEST(Bursts, ThePlanDoesNotDependOnTheOrderTheFlowsAreListedIn) {
  auto flows = skewed_step();
  std::vector<size_t> perm(flows.size());
  std::iota(perm.begin(), perm.end(), 0);
  const double best = makespan(plan_bursts(flows, kBoth, kOnePriority, {1e9, 250e6}));
  do {
    std::vector<BurstFlow> f;
    for (size_t i : perm) f.push_back(flows[i]);
    auto plan = plan_bursts(f, kBoth, kOnePriority, {1e9, 250e6});
    EXPECT_DOUBLE_EQ(makespan(plan), best);
    for (size_t i = 0; i < f.size(); ++i)
      EXPECT_EQ(plan.path[i], f[i].burst == 655 * KiB ? 1u : 0u);
  } while (std::next_permutation(perm.begin(), perm.end()));
}

TEST(Bursts, OnEqualRailsTheRoundSplitsInHalves) {
  auto plan = plan_bursts(skewed_step(), kBoth, kOnePriority, {1e9, 1e9});
  // 1966 KiB alone against 983 + 655 + 492 = 2130 KiB: the best split of four
  EXPECT_EQ(plan.path, (std::vector<size_t>{0, 1, 1, 1}));
  EXPECT_NEAR(makespan(plan), 2130.0 * 8192 / 1e9, 1e-9);
}

TEST(Bursts, ARailOtherTrafficFillsTakesNoBurstItWouldFinishLast) {
  // rail1 has 100 Mbit left (param-sync is on): even the smallest burst
  // would finish there after all four on rail0
  auto plan = plan_bursts(skewed_step(), kBoth, kOnePriority, {1e9, 100e6});
  EXPECT_EQ(plan.path, (std::vector<size_t>{0, 0, 0, 0}));
  plan = plan_bursts(skewed_step(), kBoth, kOnePriority, {1e9, 0});
  EXPECT_EQ(plan.path, (std::vector<size_t>{0, 0, 0, 0})) << "no capacity left: no burst";
}

TEST(Bursts, AFlowGoesOnlyWhereItsClassIsAllowed) {
  // class 1's burst is the largest, so it is planned first
  std::vector<BurstFlow> flows{{0, 0, 900 * KiB}, {1, 0, 1000 * KiB}, {2, 1, 900 * KiB}};
  std::vector<std::vector<bool>> allowed{{true, true}, {true, false}, {false, false}};
  auto plan = plan_bursts(flows, allowed, {0, 0, 0}, {1e9, 1e9});
  EXPECT_EQ(plan.path[1], 0u) << "class 1 may only use rail0";
  EXPECT_EQ(plan.path[0], 1u) << "so class 0's flow takes rail1";
  EXPECT_EQ(plan.path[2], BurstPlan::kNone) << "class 2 has no rail open: no plan";
}

TEST(Bursts, AHigherPriorityClassIsPlannedFirst) {
  // a 4 MiB param-sync burst (priority 3) against a 1 MiB dispatch burst
  // (priority 6) on equal rails: largest-first alone would give the sync
  // rail0 and push the dispatch elsewhere; by priority the dispatch keeps
  // its rail and the sync goes to the other
  std::vector<BurstFlow> flows{{0, 0, 4096 * KiB}, {1, 0, 1024 * KiB}};
  std::vector<std::vector<bool>> allowed{{true, true}, {true, true}};
  auto plan = plan_bursts(flows, allowed, {3, 6}, {1e9, 1e9});
  EXPECT_EQ(plan.path[1], 0u) << "dispatch stays where it is";
  EXPECT_EQ(plan.path[0], 1u) << "the sync goes where the dispatch is not";
}

TEST(Bursts, AFlowKeepsItsRailWhenAMoveGainsLittle) {
  // two equal bursts on equal rails, both on rail1 now: one moves, the other
  // stays; and a flow whose rail finishes within 5% of the best stays
  std::vector<BurstFlow> flows{{0, 1, 1000 * KiB}, {0, 1, 1000 * KiB}};
  auto plan = plan_bursts(flows, kBoth, kOnePriority, {1e9, 1e9});
  EXPECT_EQ(std::count(plan.path.begin(), plan.path.end(), 1u), 1);
  std::vector<BurstFlow> near{{0, 0, 1000 * KiB}, {0, 1, 980 * KiB}};
  plan = plan_bursts(near, kBoth, kOnePriority, {1e9, 1.03e9});
  EXPECT_EQ(plan.path, (std::vector<size_t>{0, 1}));
}

dp_flow_key flow(uint16_t sport) {
  dp_flow_key k{};
  k.sport = sport;
  k.proto = 6;
  return k;
}

TEST(BurstSizes, ABurstTheTransportCutInTwoIsPlannedForTheWholeOneItCameAfter) {
  using namespace std::chrono_literals;
  BurstSizes sizes(150ms);
  const auto t0 = BurstSizes::Clock::now();
  EXPECT_EQ(sizes.expect(flow(1), 1966 * KiB, t0), 1966 * KiB);
  // the next step's 1.92 MiB was cut 130 KiB from its end: the plan made
  // for the part after the cut would put the next whole burst on the slow
  // rail; what the flow sent 60 ms ago still counts for 2^-0.4 of it
  const uint64_t after_cut = sizes.expect(flow(1), 130 * KiB, t0 + 60ms);
  EXPECT_NEAR(static_cast<double>(after_cut), 1966.0 * KiB * std::exp2(-0.4), 2.0);
  // another flow's measurement is its own
  EXPECT_EQ(sizes.expect(flow(2), 130 * KiB, t0 + 60ms), 130 * KiB);
  // a larger burst counts at once, whatever came before
  EXPECT_EQ(sizes.expect(flow(2), 3000 * KiB, t0 + 70ms), 3000 * KiB);
  // what dpctl flow list shows: what the plan last took
  EXPECT_EQ(sizes.last(flow(1)), after_cut);
  EXPECT_EQ(sizes.last(flow(3)), std::nullopt);
}

TEST(BurstSizes, AFlowWhoseBurstsShrankIsPlannedForWhatItSendsNowWithinAFewHalfLives) {
  using namespace std::chrono_literals;
  BurstSizes sizes(150ms);
  const auto t0 = BurstSizes::Clock::now();
  sizes.expect(flow(1), 1966 * KiB, t0);  // the hottest expert's answers, then another's
  uint64_t planned = 0;
  for (int step = 1; step <= 20; ++step)
    planned = sizes.expect(flow(1), 492 * KiB, t0 + step * 60ms);
  EXPECT_EQ(planned, 492 * KiB) << "1.2 s later the old size is gone";
  // a half-life of 0 plans for the last burst alone (as before the memory)
  BurstSizes last(0ms);
  last.expect(flow(1), 1966 * KiB, t0);
  EXPECT_EQ(last.expect(flow(1), 130 * KiB, t0 + 1ms), 130 * KiB);
}

TEST(BurstSizes, FlowsNotMeasuredForSixteenHalfLivesAreForgotten) {
  using namespace std::chrono_literals;
  BurstSizes sizes(100ms);
  const auto t0 = BurstSizes::Clock::now();
  sizes.expect(flow(1), 100 * KiB, t0);
  sizes.expect(flow(2), 100 * KiB, t0 + 1s);
  sizes.forget_idle(t0 + 1500ms);
  EXPECT_EQ(sizes.size(), 2u) << "flow 1 was measured 1.5 s ago: 15 half-lives";
  sizes.forget_idle(t0 + 1700ms);
  EXPECT_EQ(sizes.size(), 1u);
  EXPECT_EQ(sizes.expect(flow(1), 20 * KiB, t0 + 1700ms), 20 * KiB) << "forgotten, then new";
}

// ---- streams: flows without gaps, placed by count (StreamPlanner)

TEST(Streams, AFlowIsAStreamAfterHalfASecondWithoutAGap) {
  using namespace std::chrono_literals;
  Streams streams;
  const auto t0 = Streams::Clock::now();
  uint64_t bytes = 0;
  Streams::Sample s;
  for (int tick = 0; tick <= 20; ++tick) {  // 20 ticks of 50 ms at 100 Mbit/s
    s = streams.observe(flow(1), 1, bytes, 0, t0 + tick * 50ms);
    EXPECT_EQ(s.stream, tick >= 10) << "tick " << tick;
    bytes += 625'000;
  }
  EXPECT_NEAR(s.bps, 100e6, 15e6) << "its rate, smoothed";
  s = streams.observe(flow(1), 2, bytes, 0, t0 + 1050ms);
  EXPECT_FALSE(s.stream) << "a gap ended its burst: bursts again";
  // a flow that stopped sending is not streaming, whatever its burst
  Streams other;
  for (int tick = 0; tick <= 12; ++tick)
    other.observe(flow(2), 1, 1000u * tick, 0, t0 + tick * 50ms);
  EXPECT_TRUE(other.observe(flow(2), 1, 13000, 0, t0 + 650ms).stream);
  EXPECT_FALSE(other.observe(flow(2), 1, 13000, 0, t0 + 900ms).stream) << "250 ms without a byte";
  other.forget_idle(t0 + 3s);
  EXPECT_EQ(other.size(), 0u);
  // a bulk sender whose transport makes gaps: a burst a look, each one
  // outgrowing its plan (the socket held more): a stream all the same
  Streams gaps;
  for (uint32_t tick = 0; tick <= 10; ++tick) {
    s = gaps.observe(flow(3), 100 + 7 * tick, 625'000u * tick, DP_FLOW_F_OVERFLOW,
                     t0 + tick * 50ms);
    EXPECT_EQ(s.stream, tick >= 10) << "tick " << tick;
  }
  // bursts that fit their plans do not make a stream, however often
  Streams moe;
  for (uint32_t tick = 0; tick <= 20; ++tick)
    EXPECT_FALSE(moe.observe(flow(4), 100 + 3 * tick, 400'000u * tick, 0, t0 + tick * 50ms).stream);
}

TEST(Streams, CountsFollowTheDecidedSharesAndEveryRailGetsOne) {
  EXPECT_EQ(stream_counts(8, {8000, 2000}), (std::vector<size_t>{6, 2}));
  EXPECT_EQ(stream_counts(32, {8000, 2000}), (std::vector<size_t>{26, 6}));
  EXPECT_EQ(stream_counts(2, {9500, 500}), (std::vector<size_t>{1, 1})) << "one on each";
  EXPECT_EQ(stream_counts(1, {8000, 2000}), (std::vector<size_t>{1, 0})) << "the larger share";
  EXPECT_EQ(stream_counts(1, {2000, 8000}), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(stream_counts(4, {10000, 0}), (std::vector<size_t>{4, 0})) << "no share, no stream";
  EXPECT_EQ(stream_counts(3, {5000, 5000}), (std::vector<size_t>{2, 1}));
  EXPECT_EQ(stream_counts(0, {5000, 5000}), (std::vector<size_t>{0, 0}));
}

std::vector<StreamFlow> eight_on_rail0() {
  std::vector<StreamFlow> s;
  for (uint16_t i = 0; i < 8; ++i) s.push_back({flow(100 + i), 0, 0, 119e6});
  return s;
}

size_t on(const StreamPlan& p, size_t path) {
  return static_cast<size_t>(std::count(p.path.begin(), p.path.end(), path));
}

TEST(Streams, EightStreamsOnOneRailSplitAsDecidedAndStayThere) {
  using namespace std::chrono_literals;
  StreamPlanner planner;
  const auto t0 = StreamPlanner::Clock::now();
  auto streams = eight_on_rail0();
  auto plan = planner.plan(streams, {{8000, 2000}}, t0);
  EXPECT_EQ(on(plan, 0), 6u);
  EXPECT_EQ(on(plan, 1), 2u);
  // the datapath has not moved them yet: the plan holds
  auto again = planner.plan(streams, {{8000, 2000}}, t0 + 50ms);
  EXPECT_EQ(again.path, plan.path);
  // a decision that changes within the second after a move waits for it
  auto soon = planner.plan(streams, {{5000, 5000}}, t0 + 500ms);
  EXPECT_EQ(soon.path, plan.path);
  auto later = planner.plan(streams, {{5000, 5000}}, t0 + 1100ms);
  EXPECT_EQ(on(later, 0), 4u);
  EXPECT_EQ(on(later, 1), 4u);
  size_t kept = 0;
  for (size_t i = 0; i < streams.size(); ++i) kept += later.path[i] == plan.path[i];
  EXPECT_EQ(kept, 6u) << "only the two that must move move";
}

TEST(Streams, TheSlowestStreamsMoveAndOnlyToRailsWithAShare) {
  StreamPlanner planner;
  auto streams = eight_on_rail0();
  streams[3].bps = 10e6;
  streams[5].bps = 20e6;
  auto plan = planner.plan(streams, {{8000, 2000, 0}}, StreamPlanner::Clock::now());
  EXPECT_EQ(plan.path[3], 1u);
  EXPECT_EQ(plan.path[5], 1u);
  EXPECT_EQ(on(plan, 2), 0u);
  // a class not planned (no decision given) gets no plan
  StreamPlanner none;
  auto p = none.plan(streams, {{}}, StreamPlanner::Clock::now());
  EXPECT_EQ(on(p, BurstPlan::kNone), streams.size());
}

TEST(Streams, OneStreamThatCannotCarryASplitIsSaidOncePerDecision) {
  using namespace std::chrono_literals;
  StreamPlanner planner;
  const auto t0 = StreamPlanner::Clock::now();
  std::vector<StreamFlow> one{{flow(1), 0, 0, 950e6}};
  auto p = planner.plan(one, {{8000, 2000}}, t0);
  EXPECT_EQ(p.path, (std::vector<size_t>{0}));
  EXPECT_TRUE(p.shortfalls.empty()) << "judged only once settled";
  p = planner.plan(one, {{8000, 2000}}, t0 + 4s);
  ASSERT_EQ(p.shortfalls.size(), 1u);
  EXPECT_EQ(p.shortfalls[0].streams, 1u);
  EXPECT_EQ(p.shortfalls[0].carried, (std::vector<uint16_t>{10000, 0}));
  EXPECT_TRUE(planner.plan(one, {{8000, 2000}}, t0 + 5s).shortfalls.empty()) << "said once";
  EXPECT_EQ(planner.plan(one, {{7000, 3000}}, t0 + 6s).shortfalls.size(), 1u) << "new decision";
  // two elastic streams that fill rails of 1 Gbit and 250 Mbit carry 80/20
  StreamPlanner two;
  std::vector<StreamFlow> elastic{{flow(1), 0, 0, 1000e6}, {flow(2), 0, 1, 250e6}};
  EXPECT_EQ(two.plan(elastic, {{8000, 2000}}, t0).path, (std::vector<size_t>{0, 1}));
  EXPECT_TRUE(two.plan(elastic, {{8000, 2000}}, t0 + 4s).shortfalls.empty());
  // the same two at a fixed 100 Mbit/s each carry half and half: said
  elastic[0].bps = elastic[1].bps = 100e6;
  auto half = two.plan(elastic, {{8000, 2000}}, t0 + 5s);
  ASSERT_EQ(half.shortfalls.size(), 1u);
  EXPECT_EQ(half.shortfalls[0].carried, (std::vector<uint16_t>{5000, 5000}));
}

}  // namespace
}  // namespace dp

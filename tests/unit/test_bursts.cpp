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

}  // namespace
}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
// What the paths carried of a class under its decision (core/carried.cpp).
#include <gtest/gtest.h>

#include <chrono>

#include "dualpath/core/carried.h"

namespace dp {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t MiB = 1 << 20;

TEST(CarriedShares, TheBytesSinceTheDecisionGiveTheShares) {
  CarriedShares cs;
  const auto t0 = CarriedShares::Clock::now();
  // 99 MiB on rail0 before the decision: not counted
  cs.observe({{2000, 8000}}, {{99 * MiB, 0}}, t0);
  EXPECT_FALSE(cs.carried(0)) << "nothing sent under it yet";
  cs.observe({{2000, 8000}}, {{99 * MiB + MiB / 4, MiB / 4}}, t0 + 500ms);
  EXPECT_FALSE(cs.carried(0)) << "half a MiB says nothing";
  cs.observe({{2000, 8000}}, {{100 * MiB, 4 * MiB}}, t0 + 2s);
  auto c = cs.carried(0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->share, (std::vector<uint16_t>{2000, 8000}));
  EXPECT_EQ(c->bytes, 5 * MiB);
  EXPECT_DOUBLE_EQ(c->seconds, 2);
  EXPECT_FALSE(cs.carried(1)) << "no such class";
}

TEST(CarriedShares, ANewDecisionStartsAgainAndASmallStepDoesNot) {
  CarriedShares cs;
  const auto t0 = CarriedShares::Clock::now();
  cs.observe({{10000, 0}}, {{0, 0}}, t0);
  cs.observe({{10000, 0}}, {{10 * MiB, 0}}, t0 + 1s);
  cs.observe({{8000, 2000}}, {{10 * MiB, 0}}, t0 + 2s);  // a spill
  EXPECT_FALSE(cs.carried(0));
  cs.observe({{8000, 2000}}, {{18 * MiB, 2 * MiB}}, t0 + 3s);
  cs.observe({{7800, 2200}}, {{26 * MiB, 4 * MiB}}, t0 + 4s);  // the spill follows the load
  auto c = cs.carried(0);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->share, (std::vector<uint16_t>{8000, 2000}));
  EXPECT_DOUBLE_EQ(c->seconds, 2);
  // counters that went back (a datapath loaded afresh) start over too
  cs.observe({{7800, 2200}}, {{MiB, 0}}, t0 + 5s);
  EXPECT_FALSE(cs.carried(0));
}

TEST(CarriedShares, AtMostTheLastMinuteCounts) {
  CarriedShares cs;
  const auto t0 = CarriedShares::Clock::now();
  uint64_t r0 = 0, r1 = 0;
  for (int s = 0; s <= 120; ++s) {  // a minute on rail0 alone, then one split evenly
    cs.observe({{5000, 5000}}, {{r0, r1}}, t0 + s * 1s);
    if (s < 60)
      r0 += 2 * MiB;
    else
      r0 += MiB, r1 += MiB;
  }
  auto c = cs.carried(0);
  ASSERT_TRUE(c);
  EXPECT_LE(c->seconds, 61);
  EXPECT_NEAR(c->share[1], 5000, 100) << "the first minute is gone";
}

}  // namespace
}  // namespace dp

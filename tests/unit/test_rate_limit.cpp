// SPDX-License-Identifier: Apache-2.0
// Token buckets per key (core/rate_limit.h).
#include <gtest/gtest.h>

#include <chrono>

#include "dualpath/core/rate_limit.h"

namespace dp {
namespace {

using namespace std::chrono_literals;

TEST(RateLimiter, ABurstThenTheRateForEachKeyOnItsOwn) {
  RateLimiter<int> r(10, 5, 100);
  const auto t0 = RateLimiter<int>::Clock::now();
  EXPECT_EQ(r.take(1, 25, t0), 10) << "the burst";
  EXPECT_FALSE(r.allow(1, t0));
  EXPECT_TRUE(r.allow(2, t0)) << "another key";
  EXPECT_EQ(r.take(1, 25, t0 + 1s), 5) << "a second at 5 a second";
  EXPECT_EQ(r.take(1, 100, t0 + 1h), 10) << "never more than the burst";
  EXPECT_EQ(r.take(1, -3, t0 + 2h), 0);
}

TEST(RateLimiter, ATableAtItsBoundForgetsTheKeyHeardFromLeastRecently) {
  RateLimiter<int> r(1, 0.001, 2);
  const auto t0 = RateLimiter<int>::Clock::now();
  EXPECT_TRUE(r.allow(1, t0));
  EXPECT_TRUE(r.allow(2, t0 + 1ms));
  EXPECT_FALSE(r.allow(1, t0 + 2ms)) << "1 is spent";
  EXPECT_TRUE(r.allow(3, t0 + 3ms)) << "a third key: 2 is forgotten";
  EXPECT_EQ(r.size(), 2u);
  EXPECT_TRUE(r.allow(2, t0 + 4ms)) << "2 starts again with its burst";
}

}  // namespace
}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
// Estimators fed synthetic series: a step, a spike, noise, counter resets.
#include <gtest/gtest.h>

#include <random>

#include "dualpath/core/estimators.h"

using namespace std::chrono_literals;
using dp::Clock;

namespace {
const Clock::time_point t0 = Clock::time_point(1h);
}

TEST(RateEstimator, ConstantRateIsExact) {
  dp::RateEstimator e(0.2);
  uint64_t bytes = 0;
  for (int i = 0; i <= 20; ++i) {
    e.update(bytes, t0 + i * 50ms);
    bytes += 6'250'000;  // 125 MB/s = 1 Gbit/s over 50 ms
  }
  ASSERT_TRUE(e.valid());
  EXPECT_NEAR(e.rate(), 125e6, 1);
  EXPECT_EQ(e.window(), 250ms) << "tick / weight";
}

TEST(RateEstimator, StepIsFollowedWithinTheTimeConstant) {
  dp::RateEstimator e(0.2);
  uint64_t bytes = 0;
  int i = 0;
  for (; i <= 20; ++i, bytes += 1000) e.update(bytes, t0 + i * 50ms);  // 20 kB/s
  EXPECT_NEAR(e.rate(), 20e3, 1);
  int ticks = 0;
  for (; e.rate() < 0.9 * 200e3; ++i, ++ticks, bytes += 10000) e.update(bytes, t0 + i * 50ms);
  // 1 - 0.8^n >= 0.9 at n = 11: the step is 90% followed in ~11 ticks
  EXPECT_LE(ticks, 12);
  EXPECT_GE(ticks, 9) << "smoothing that reacts at once is no smoothing";
}

TEST(RateEstimator, SpikeDecays) {
  dp::RateEstimator e(0.2);
  uint64_t bytes = 0;
  for (int i = 0; i <= 10; ++i, bytes += 1000) e.update(bytes, t0 + i * 50ms);
  bytes += 100'000;  // one burst
  e.update(bytes, t0 + 11 * 50ms);
  double peak = e.rate();
  EXPECT_GT(peak, 100e3);
  EXPECT_NEAR(e.last_rate(), 2.02e6, 1e3);
  for (int i = 12; i < 60; ++i, bytes += 1000)
    e.update(bytes, t0 + i * 50ms);  // 0.8^48 of the peak
  EXPECT_NEAR(e.rate(), 20e3, 500);
}

TEST(RateEstimator, NoiseAveragesOut) {
  dp::RateEstimator e(0.1);
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint64_t> jitter(0, 2000);  // mean 1000 per tick
  uint64_t bytes = 0;
  double sum = 0;
  int n = 0;
  for (int i = 0; i < 400; ++i) {
    bytes += jitter(rng);
    e.update(bytes, t0 + i * 50ms);
    if (i > 100) {
      sum += e.rate();
      ++n;
      EXPECT_NEAR(e.rate(), 20e3, 8e3) << "at tick " << i;
    }
  }
  EXPECT_NEAR(sum / n, 20e3, 1.5e3);
}

TEST(RateEstimator, CounterResetRestartsInsteadOfGoingNegative) {
  dp::RateEstimator e;
  e.update(1'000'000, t0);
  e.update(1'001'000, t0 + 50ms);
  e.update(10, t0 + 100ms);  // map recreated
  EXPECT_FALSE(e.valid());
  e.update(1010, t0 + 150ms);
  EXPECT_NEAR(e.rate(), 20e3, 1);
}

TEST(Histogram, BucketsAreLog2) {
  EXPECT_EQ(dp::histogram_bucket(0), 0);
  EXPECT_EQ(dp::histogram_bucket(1), 0);
  EXPECT_EQ(dp::histogram_bucket(2), 1);
  EXPECT_EQ(dp::histogram_bucket(3), 1);
  EXPECT_EQ(dp::histogram_bucket(1024), 10);
  EXPECT_EQ(dp::histogram_bucket(~0ull), static_cast<int>(dp::kHistBuckets) - 1);
}

TEST(Histogram, QuantileInterpolatesInsideTheBucket) {
  dp::Histogram h{};
  h[dp::histogram_bucket(100)] = 100;  // all in [64, 128)
  EXPECT_NEAR(*dp::histogram_quantile(h, 0.5), 96, 0.01);
  EXPECT_NEAR(*dp::histogram_quantile(h, 1.0), 128, 0.01);
  EXPECT_FALSE(dp::histogram_quantile(dp::Histogram{}, 0.5));
}

TEST(WindowedHistogram, SpikeMovesP99NotP50AndLeavesWithTheWindow) {
  dp::WindowedHistogram w(1s);
  dp::Histogram cum{};
  auto tick = [&](int i, uint64_t usec, uint64_t n) {
    cum[static_cast<size_t>(dp::histogram_bucket(usec))] += n;
    w.update(cum, t0 + i * 100ms);
  };
  for (int i = 0; i < 20; ++i) tick(i, 100, 100);  // 100 us RTTs
  tick(20, 5000, 20);                              // 20 of 5 ms: 2% of the window
  auto p = w.percentiles();
  ASSERT_TRUE(p);
  EXPECT_LT(p->p50, 128);
  EXPECT_GT(p->p99, 4096) << "the spike shows in the tail";
  EXPECT_EQ(p->window, 1s);
  EXPECT_EQ(p->samples, 9u * 100 + 20) << "ticks 11-20: the snapshot at 1 s is the base";
  for (int i = 21; i < 40; ++i) tick(i, 100, 100);
  p = w.percentiles();
  ASSERT_TRUE(p);
  EXPECT_LT(p->p99, 128) << "a second later the spike is out of the window";
}

TEST(WindowedRatio, LossOverTheWindow) {
  dp::WindowedRatio loss(1s);
  uint64_t retrans = 0, sent = 0;
  for (int i = 0; i < 30; ++i) {
    sent += 1000;
    if (i >= 20) retrans += 10;  // 1% loss from tick 20 on
    loss.update(retrans, sent, t0 + i * 100ms);
  }
  auto r = loss.ratio();
  ASSERT_TRUE(r);
  EXPECT_NEAR(r->value, 0.01, 1e-9) << "the window holds only the lossy ticks";
  EXPECT_EQ(r->window, 1s);
  EXPECT_EQ(r->denominator, 10'000u);
}

TEST(WindowedRatio, NoTrafficMeansNoEstimate) {
  dp::WindowedRatio loss(1s);
  loss.update(5, 100, t0);
  loss.update(5, 100, t0 + 100ms);
  EXPECT_FALSE(loss.ratio());
}

// SPDX-License-Identifier: Apache-2.0
// PathMeasure: rates, utilisation, and reconciliation of the datapath's
// counters with the link's, from synthetic snapshots.
#include <gtest/gtest.h>

#include "dualpath/core/measure.h"

using namespace std::chrono_literals;
using dp::Clock;

namespace {

const Clock::time_point t0 = Clock::time_point(1h);

struct Feed {
  dp::PathMeasure m{1'000'000'000, 0.2, 2s};
  uint64_t dp = 0, link = 0;
  int tick = 0;
  void step(uint64_t dp_bytes, uint64_t link_bytes, uint64_t dropped = 0) {
    dp += dp_bytes;
    link += link_bytes;
    dp::PathSnapshot s;
    s.t = t0 + tick++ * 50ms;
    s.dp_tx_bytes = dp;
    s.link.tx_bytes = link;
    s.link.tx_dropped = dropped;
    m.update(s);
  }
};

}  // namespace

TEST(PathMeasure, UtilisationIsLinkRateOverCapacity) {
  Feed f;
  for (int i = 0; i < 40; ++i) f.step(3'125'000, 3'125'000);  // 500 Mbit/s
  EXPECT_NEAR(f.m.tx_bps(), 500e6, 1e3);
  EXPECT_NEAR(f.m.utilisation(), 0.5, 1e-6);
  EXPECT_TRUE(f.m.reconciliation().agree);
}

TEST(PathMeasure, RdmaTrafficAddsToTheLoad) {
  dp::PathMeasure m{1'000'000'000, 0.2, 2s};
  for (int i = 0; i < 40; ++i) {
    dp::PathSnapshot s;
    s.t = t0 + i * 50ms;
    s.link.tx_bytes = static_cast<uint64_t>(i) * 625'000;  // 100 Mbit/s through the kernel
    s.rdma = dp::RdmaCounters{};
    s.rdma->tx_bytes = static_cast<uint64_t>(i) * 2'500'000;  // 400 Mbit/s of RoCE
    m.update(s);
  }
  EXPECT_NEAR(m.utilisation(), 0.5, 1e-6);
  EXPECT_NEAR(m.rdma_tx_bps(), 400e6, 1e3);
}

TEST(PathMeasure, AQueueFillingAtTheStartOfABurstIsNotADisagreement) {
  Feed f;
  for (int i = 0; i < 5; ++i) f.step(2'000'000, 1'000'000);   // the qdisc fills
  for (int i = 0; i < 40; ++i) f.step(1'000'000, 1'000'000);  // steady state
  EXPECT_TRUE(f.m.reconciliation().agree) << f.m.reconciliation().explanation;
}

TEST(PathMeasure, PersistentQdiscDropsAreReported) {
  Feed f;
  uint64_t dropped = 0;
  for (int i = 0; i < 40; ++i) f.step(1'000'000, 800'000, dropped += 10);
  const auto& r = f.m.reconciliation();
  ASSERT_FALSE(r.agree);
  EXPECT_NE(r.explanation.find("qdisc dropped"), std::string::npos) << r.explanation;
  EXPECT_EQ(r.window, 1950ms) << "40 ticks span 1.95 s, inside the 2 s window";
  EXPECT_GT(r.link_dropped, 0u);
}

TEST(PathMeasure, TrafficThatBypassesTcIsReported) {
  Feed f;
  for (int i = 0; i < 40; ++i) f.step(500'000, 1'000'000);
  ASSERT_FALSE(f.m.reconciliation().agree);
  EXPECT_NE(f.m.reconciliation().explanation.find("bypasses tc egress"), std::string::npos);
}

TEST(PathMeasure, SmallDifferencesOnLittleTrafficAreNoise) {
  Feed f;
  for (int i = 0; i < 40; ++i) f.step(1000, 800);  // 20% apart but only kilobytes
  EXPECT_TRUE(f.m.reconciliation().agree);
}

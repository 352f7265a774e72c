// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "dualpath/core/units.h"

using namespace std::chrono_literals;

TEST(Units, BandwidthAcceptsSiBitUnits) {
  EXPECT_EQ(*dp::parse_bandwidth("200Gbit"), 200'000'000'000ull);
  EXPECT_EQ(*dp::parse_bandwidth("250Mbit"), 250'000'000ull);
  EXPECT_EQ(*dp::parse_bandwidth("2.5gbit"), 2'500'000'000ull);
  EXPECT_EQ(*dp::parse_bandwidth("1 Tbit"), 1'000'000'000'000ull);
  EXPECT_EQ(*dp::parse_bandwidth("100Kbit/s"), 100'000ull);
}

TEST(Units, BandwidthRefusesAmbiguousAndUnknownUnits) {
  auto bps = dp::parse_bandwidth("10Gbps");
  ASSERT_FALSE(bps);
  EXPECT_NE(bps.error().message.find("ambiguous"), std::string::npos);
  EXPECT_FALSE(dp::parse_bandwidth("10"));
  EXPECT_FALSE(dp::parse_bandwidth("10GB"));
  EXPECT_FALSE(dp::parse_bandwidth("Gbit"));
  EXPECT_FALSE(dp::parse_bandwidth("0bit"));
}

TEST(Units, DurationAcceptsAllUnits) {
  EXPECT_EQ(*dp::parse_duration("500ms"), 500ms);
  EXPECT_EQ(*dp::parse_duration("0.5ms"), 500us);
  EXPECT_EQ(*dp::parse_duration("5m"), 5min);
  EXPECT_EQ(*dp::parse_duration("200us"), 200us);
  EXPECT_EQ(*dp::parse_duration("2h"), 2h);
  EXPECT_EQ(*dp::parse_duration("30s"), 30s);
}

TEST(Units, DurationRefusesMissingOrUnknownUnit) {
  EXPECT_FALSE(dp::parse_duration("500"));
  EXPECT_FALSE(dp::parse_duration("5 minutes"));
  EXPECT_FALSE(dp::parse_duration("ms"));
}

TEST(Units, FormatsRoundTrip) {
  EXPECT_EQ(dp::format_duration(500ms), "500ms");
  EXPECT_EQ(dp::format_duration(5min), "5m");
  EXPECT_EQ(dp::format_duration(200us), "200us");
  EXPECT_EQ(dp::format_bandwidth(1.25e9), "1.25 Gbit/s");
  EXPECT_EQ(dp::format_bytes(512), "512 B");
}

TEST(Result, AnErrorNamesTheFileAndLineThatMadeIt) {
  int line = __LINE__ + 1;
  dp::Error e = DP_ERROR("x {}", 1);
  EXPECT_EQ(e.where, "test_units.cpp:" + std::to_string(line));
  EXPECT_EQ(e.what(), "x 1");
}

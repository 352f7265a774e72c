// SPDX-License-Identifier: Apache-2.0
// dp-load's protocol, payload checksums and histogram.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "load_core.h"

namespace dpload {
namespace {

TEST(LoadHistogram, IsExactBelow128AndWithinOnePartIn128Above) {
  for (uint64_t v : {0ull, 1ull, 127ull}) {
    EXPECT_EQ(Histogram::bucket_low(Histogram::bucket_of(v)), v);
    EXPECT_EQ(Histogram::bucket_high(Histogram::bucket_of(v)), v);
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100000; ++i) {
    uint64_t v = rng() >> (rng() % 60);
    size_t b = Histogram::bucket_of(v);
    ASSERT_LT(b, Histogram::kBuckets);
    ASSERT_LE(Histogram::bucket_low(b), v);
    ASSERT_GE(Histogram::bucket_high(b), v);
    ASSERT_LE(Histogram::bucket_high(b) - Histogram::bucket_low(b), v / 128) << v;
  }
  EXPECT_EQ(Histogram::bucket_of(UINT64_MAX), Histogram::kBuckets - 1);
}

TEST(LoadHistogram, QuantilesMatchASortedSample) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> d(11, 1.2);  // ~60 us median, long tail, in ns
  Histogram h;
  std::vector<uint64_t> all;
  for (int i = 0; i < 200000; ++i) {
    auto v = static_cast<uint64_t>(d(rng));
    h.record(v);
    all.push_back(v);
  }
  std::sort(all.begin(), all.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    double exact =
        static_cast<double>(all[static_cast<size_t>(q * static_cast<double>(all.size())) - 1]);
    double got = static_cast<double>(h.quantile(q));
    EXPECT_NEAR(got, exact, exact / 64) << "q " << q;
  }
  EXPECT_EQ(h.quantile(1.0), all.back());
  EXPECT_EQ(h.min(), all.front());
  EXPECT_EQ(h.count(), all.size());
  Histogram a, b;
  for (size_t i = 0; i < all.size(); ++i) (i % 2 ? a : b).record(all[i]);
  a.merge(b);
  EXPECT_EQ(a.quantile(0.99), h.quantile(0.99));
  EXPECT_EQ(Histogram().quantile(0.5), 0u);
}

TEST(LoadProtocol, HelloAndHeaderRoundTripAndRejectGarbage) {
  Hello h{Kind::Combine, 3, 4, 5, 0x1122334455667788ull};
  auto b = encode(h);
  auto back = decode_hello(b.data());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->kind, Kind::Combine);
  EXPECT_EQ(back->index, 3);
  EXPECT_EQ(back->dispatch, 4);
  EXPECT_EQ(back->combine, 5);
  EXPECT_EQ(back->seed, 0x1122334455667788ull);
  b[0] ^= 1;
  EXPECT_FALSE(decode_hello(b.data()));
  b = encode(h);
  b[5] = 9;  // no such kind
  EXPECT_FALSE(decode_hello(b.data()));

  MsgHeader m{42, 1 << 20, 0x20003};
  auto mb = encode(m);
  auto mh = decode_header(mb.data());
  ASSERT_TRUE(mh);
  EXPECT_EQ(mh->step, 42u);
  EXPECT_EQ(mh->len, 1u << 20);
  EXPECT_EQ(mh->conn, 0x20003u);
  mb[3] = 0;
  EXPECT_FALSE(decode_header(mb.data()));
}

TEST(LoadPayload, IsDeterministicAndDiffersPerConnectionAndStep) {
  std::vector<uint8_t> a(1000), b(1000), c(1000), d(1000);
  fill_payload(a.data(), a.size(), 1, 7, 9);
  fill_payload(b.data(), b.size(), 1, 7, 9);
  fill_payload(c.data(), c.size(), 1, 7, 10);
  fill_payload(d.data(), d.size(), 1, 8, 9);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c) << "another step";
  EXPECT_NE(a, d) << "another connection";
  Fnv64 f;
  f.add(a.data(), a.size());
  EXPECT_EQ(f.value(), payload_checksum(1000, 1, 7, 9));
  a[500] ^= 0x10;  // one flipped bit is caught
  Fnv64 g;
  g.add(a.data(), a.size());
  EXPECT_NE(g.value(), payload_checksum(1000, 1, 7, 9));
  // odd lengths fill every byte
  std::vector<uint8_t> e(13, 0);
  fill_payload(e.data(), e.size(), 1, 1, 1);
  EXPECT_NE(e[12], 0);
}

TEST(LoadUnits, Sizes) {
  EXPECT_EQ(parse_size("1MiB"), 1u << 20);
  EXPECT_EQ(parse_size("64KB"), 64000u);
  EXPECT_EQ(parse_size("512"), 512u);
  EXPECT_FALSE(parse_size("1 furlong"));
  EXPECT_FALSE(parse_size("-1MB"));
}

TEST(Load, PayloadIsComparedAsItIsMade) {
  std::vector<uint8_t> a(1003);
  fill_payload(a.data(), a.size(), 1, 7, 9);
  EXPECT_TRUE(payload_matches(a.data(), a.size(), 1, 7, 9));
  EXPECT_FALSE(payload_matches(a.data(), a.size(), 1, 7, 10)) << "another step";
  a[1001] ^= 1;
  EXPECT_FALSE(payload_matches(a.data(), a.size(), 1, 7, 9)) << "a flipped bit in the tail";
}

TEST(Load, SkewedSizesSumToTheStepAndRotate) {
  auto equal = skewed_sizes(4 << 20, 4, 0, 0);
  EXPECT_EQ(equal, (std::vector<uint32_t>(4, 1 << 20)));
  auto a = skewed_sizes(4 << 20, 4, 1.0, 0), b = skewed_sizes(4 << 20, 4, 1.0, 1);
  uint64_t sa = 0, sb = 0;
  for (size_t i = 0; i < 4; ++i) sa += a[i], sb += b[i];
  EXPECT_EQ(sa, 4u << 20);
  EXPECT_EQ(sb, 4u << 20);
  EXPECT_GT(a[0], a[1]);
  EXPECT_GT(a[1], a[2]);
  EXPECT_GT(a[2], a[3]);
  EXPECT_NEAR(double(a[0]) / a[3], 4.0, 0.01) << "1/1 against 1/4";
  EXPECT_NEAR(b[1], a[0], 4)
      << "one period later the next connection is the hottest (rounding aside)";
  EXPECT_EQ(skewed_sizes(4 << 20, 4, 1.0, 4), a) << "and after n periods the first again";
}

TEST(Load, RoundFloorIsTheBestSplitOfWholeBurstsAndOfEveryByte) {
  // the default workload's round: 4 MiB at skew 1 (1.92/0.96/0.64/0.48 MiB)
  // on 1 Gbit/s + 250 Mbit/s
  auto sizes = skewed_sizes(4 << 20, 4, 1.0, 0);
  auto f = round_floor(sizes, 1e9, 250e6);
  const double bits = 8.0 * (4 << 20);
  EXPECT_DOUBLE_EQ(f.one_rail_s, bits / 1e9);
  EXPECT_DOUBLE_EQ(f.shared_s, bits / 1.25e9);
  // the best whole split puts the 0.64 MiB burst on rail1: rail0 then carries
  // 3.36 MiB (28.2 ms), rail1 0.64 MiB (21.5 ms)
  EXPECT_NEAR(f.whole_bursts_s, 8.0 * (sizes[0] + sizes[1] + sizes[3]) / 1e9, 1e-9);
  EXPECT_GT(f.whole_bursts_s, f.shared_s);
  EXPECT_LT(f.whole_bursts_s, f.one_rail_s);
  // equal rails: 1.92 against 0.96 + 0.64 + 0.48 = 2.08 MiB
  auto e = round_floor(sizes, 1e9, 1e9);
  EXPECT_NEAR(e.whole_bursts_s, 8.0 * (sizes[1] + sizes[2] + sizes[3]) / 1e9, 1e-9);
  EXPECT_DOUBLE_EQ(e.shared_s, bits / 2e9);
  // one burst cannot be split: the floor of whole bursts is rail0 alone
  auto one = round_floor({4u << 20}, 1e9, 250e6);
  EXPECT_DOUBLE_EQ(one.whole_bursts_s, one.one_rail_s);
  // no second rail
  EXPECT_DOUBLE_EQ(round_floor(sizes, 1e9, 0).whole_bursts_s, bits / 1e9);
}

}  // namespace
}  // namespace dpload

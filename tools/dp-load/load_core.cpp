// SPDX-License-Identifier: Apache-2.0
#include "load_core.h"

#include "dualpath/core/units.h"

#include <algorithm>
#include <bit>
#include <cmath>

namespace dpload {

// ---------------------------------------------------------------- histogram

size_t Histogram::bucket_of(uint64_t v) {
  constexpr uint64_t kSub = 1ull << kSubBits;
  if (v < kSub) return static_cast<size_t>(v);
  int e = 63 - std::countl_zero(v);  // >= kSubBits
  int shift = e - kSubBits;
  return static_cast<size_t>((static_cast<uint64_t>(shift + 1) << kSubBits) +
                             ((v >> shift) - kSub));
}

uint64_t Histogram::bucket_low(size_t b) {
  constexpr uint64_t kSub = 1ull << kSubBits;
  if (b < kSub) return b;
  uint64_t shift = (b >> kSubBits) - 1;
  return (kSub + (b & (kSub - 1))) << shift;
}

uint64_t Histogram::bucket_high(size_t b) {
  constexpr uint64_t kSub = 1ull << kSubBits;
  if (b < kSub) return b;
  uint64_t shift = (b >> kSubBits) - 1;
  return bucket_low(b) + ((1ull << shift) - 1);
}

void Histogram::record(uint64_t v) {
  ++counts_[bucket_of(v)];
  ++count_;
  sum_ += v;
  min_ = std::min(min_, v);
  max_ = std::max(max_, v);
}

void Histogram::merge(const Histogram& o) {
  for (size_t i = 0; i < kBuckets; ++i) counts_[i] += o.counts_[i];
  count_ += o.count_;
  sum_ += o.sum_;
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
}

uint64_t Histogram::quantile(double q) const {
  if (!count_) return 0;
  auto rank =
      static_cast<uint64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_)));
  rank = std::max<uint64_t>(rank, 1);
  uint64_t seen = 0;
  for (size_t b = 0; b < kBuckets; ++b) {
    seen += counts_[b];
    if (seen >= rank) return std::min(bucket_high(b), max_);
  }
  return max_;
}

json Histogram::summary(double scale) const {
  auto v = [&](uint64_t x) { return static_cast<double>(x) / scale; };
  return {{"count", count_},
          {"min", v(min())},
          {"mean", mean() / scale},
          {"p50", v(quantile(0.5))},
          {"p90", v(quantile(0.9))},
          {"p99", v(quantile(0.99))},
          {"p999", v(quantile(0.999))},
          {"max", v(max_)}};
}

// ---------------------------------------------------------------- protocol

const char* to_string(Kind k) {
  switch (k) {
    case Kind::Dispatch:
      return "dispatch";
    case Kind::Combine:
      return "combine";
    case Kind::Rpc:
      return "rpc";
    case Kind::Logs:
      return "logs";
    case Kind::Sync:
      return "sync";
  }
  return "?";
}

namespace {
void put(uint8_t*& p, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) *p++ = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get(const uint8_t*& p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = v << 8 | *p++;
  return v;
}
}  // namespace

std::array<uint8_t, kHelloSize> encode(const Hello& h) {
  std::array<uint8_t, kHelloSize> b{};
  uint8_t* p = b.data();
  put(p, kHelloMagic, 4);
  put(p, kVersion, 1);
  put(p, static_cast<uint8_t>(h.kind), 1);
  put(p, h.index, 2);
  put(p, h.dispatch, 2);
  put(p, h.combine, 2);
  put(p, h.seed, 8);
  return b;
}

std::optional<Hello> decode_hello(const uint8_t* p) {
  if (get(p, 4) != kHelloMagic || get(p, 1) != kVersion) return std::nullopt;
  Hello h;
  auto k = get(p, 1);
  if (k < 1 || k > 5) return std::nullopt;
  h.kind = static_cast<Kind>(k);
  h.index = static_cast<uint16_t>(get(p, 2));
  h.dispatch = static_cast<uint16_t>(get(p, 2));
  h.combine = static_cast<uint16_t>(get(p, 2));
  h.seed = get(p, 8);
  return h;
}

std::array<uint8_t, kHeaderSize> encode(const MsgHeader& h) {
  std::array<uint8_t, kHeaderSize> b{};
  uint8_t* p = b.data();
  put(p, kMsgMagic, 4);
  put(p, h.step, 8);
  put(p, h.len, 4);
  put(p, h.conn, 4);
  return b;
}

std::optional<MsgHeader> decode_header(const uint8_t* p) {
  if (get(p, 4) != kMsgMagic) return std::nullopt;
  MsgHeader h;
  h.step = get(p, 8);
  h.len = static_cast<uint32_t>(get(p, 4));
  h.conn = static_cast<uint32_t>(get(p, 4));
  return h;
}

namespace {

// The payload's word i of (seed, conn, step): splitmix64.
struct PayloadStream {
  uint64_t x;
  PayloadStream(uint64_t seed, uint32_t conn, uint64_t step)
      : x(seed ^ (uint64_t{conn} << 40) ^ (step * 0x9e3779b97f4a7c15ull)) {}
  uint64_t next() {
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

}  // namespace

void fill_payload(uint8_t* out, size_t len, uint64_t seed, uint32_t conn, uint64_t step) {
  PayloadStream ps(seed, conn, step);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t z = ps.next();
    for (size_t j = 0; j < 8; ++j) out[i + j] = static_cast<uint8_t>(z >> (8 * j));
  }
  if (i < len) {
    uint64_t z = ps.next();
    for (size_t j = 0; i + j < len; ++j) out[i + j] = static_cast<uint8_t>(z >> (8 * j));
  }
}

bool payload_matches(const uint8_t* p, size_t len, uint64_t seed, uint32_t conn, uint64_t step) {
  PayloadStream ps(seed, conn, step);
  size_t i = 0;
  uint64_t diff = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t z = ps.next(), w = 0;
    for (size_t j = 0; j < 8; ++j) w |= uint64_t{p[i + j]} << (8 * j);
    diff |= w ^ z;
  }
  if (i < len) {
    uint64_t z = ps.next();
    for (size_t j = 0; i + j < len; ++j) diff |= uint64_t(p[i + j] ^ uint8_t(z >> (8 * j)));
  }
  return diff == 0;
}

std::vector<uint32_t> skewed_sizes(uint64_t total, size_t n, double skew, uint64_t phase) {
  std::vector<uint32_t> out(n, 0);
  if (n == 0) return out;
  std::vector<double> w(n);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    size_t rank = (i + n - phase % n) % n;  // connection `phase % n` is the hottest
    sum += w[i] = 1.0 / std::pow(static_cast<double>(rank + 1), skew);
  }
  uint64_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<uint32_t>(static_cast<double>(total) * w[i] / sum);
    given += out[i];
  }
  out[0] += static_cast<uint32_t>(total - given);
  return out;
}

RoundFloor round_floor(const std::vector<uint32_t>& bursts, double rail0_bps, double rail1_bps) {
  RoundFloor f;
  if (rail0_bps <= 0 || rail1_bps < 0) return f;
  double total = 0;
  for (auto b : bursts) total += 8.0 * b;
  f.one_rail_s = total / rail0_bps;
  f.shared_s = total / (rail0_bps + rail1_bps);
  f.whole_bursts_s = f.one_rail_s;
  const size_t n = std::min<size_t>(bursts.size(), 16);
  if (rail1_bps <= 0) return f;
  for (uint32_t set = 0; set < (1u << n); ++set) {  // bit i: burst i on rail1
    double on0 = 0, on1 = 0;
    for (size_t i = 0; i < bursts.size(); ++i)
      (i < n && (set >> i) & 1 ? on1 : on0) += 8.0 * bursts[i];
    f.whole_bursts_s = std::min(f.whole_bursts_s, std::max(on0 / rail0_bps, on1 / rail1_bps));
  }
  return f;
}

uint64_t payload_checksum(size_t len, uint64_t seed, uint32_t conn, uint64_t step) {
  std::vector<uint8_t> buf(len);
  fill_payload(buf.data(), len, seed, conn, step);
  Fnv64 f;
  f.add(buf.data(), len);
  return f.value();
}

std::optional<uint64_t> parse_size(const std::string& s) {
  auto v = dp::parse_size(s);
  return v ? std::optional<uint64_t>(*v) : std::nullopt;
}

}  // namespace dpload

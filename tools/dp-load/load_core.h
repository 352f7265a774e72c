// SPDX-License-Identifier: Apache-2.0
// dp-load's pure parts: the wire protocol (hello and checksummed messages),
// the deterministic payload, and a log-linear latency histogram (HdrHistogram
// style: every value within 1/128 of its true value, exact below 128).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dpload {

using json = nlohmann::json;

// ---------------------------------------------------------------- histogram

class Histogram {
 public:
  static constexpr int kSubBits = 7;  // 128 sub-buckets per power of two
  static constexpr size_t kBuckets = (64 - kSubBits + 1) << kSubBits;

  void record(uint64_t v);
  void merge(const Histogram& o);
  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const {
    return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0;
  }
  // The value at quantile q (0..1): the upper edge of the bucket holding the
  // ceil(q * count)-th smallest value, never above max().
  uint64_t quantile(double q) const;
  // {"count", "min", "mean", "p50", "p90", "p99", "p999", "max"} in `unit`s
  // (values are divided by `scale`).
  json summary(double scale) const;

  static size_t bucket_of(uint64_t v);
  static uint64_t bucket_low(size_t b);
  static uint64_t bucket_high(size_t b);  // inclusive

 private:
  std::vector<uint64_t> counts_ = std::vector<uint64_t>(kBuckets, 0);
  uint64_t count_ = 0, sum_ = 0, min_ = UINT64_MAX, max_ = 0;
};

// ---------------------------------------------------------------- protocol

enum class Kind : uint8_t { Dispatch = 1, Combine = 2, Rpc = 3, Logs = 4, Sync = 5 };
const char* to_string(Kind k);

constexpr uint32_t kHelloMagic = 0x44504c44;  // "DPLD"
constexpr uint32_t kMsgMagic = 0x44504d53;    // "DPMS"
constexpr uint8_t kVersion = 2;               // 2: word-wise checksums, skewed bursts

// First bytes of every connection, client to server.
struct Hello {
  Kind kind = Kind::Dispatch;
  uint16_t index = 0;     // which connection of its kind
  uint16_t dispatch = 0;  // connections of each kind in the session
  uint16_t combine = 0;
  uint64_t seed = 0;
};
constexpr size_t kHelloSize = 4 + 1 + 1 + 2 + 2 + 2 + 8;
std::array<uint8_t, kHelloSize> encode(const Hello& h);
std::optional<Hello> decode_hello(const uint8_t* p);  // nullopt: wrong magic or version

// A message: header, `len` payload bytes, then the FNV-1a 64 of the payload.
struct MsgHeader {
  uint64_t step = 0;
  uint32_t len = 0;
  uint32_t conn = 0;  // (kind << 16) | index, for the payload stream
};
constexpr size_t kHeaderSize = 4 + 8 + 4 + 4;
constexpr size_t kTrailerSize = 8;
std::array<uint8_t, kHeaderSize> encode(const MsgHeader& h);
std::optional<MsgHeader> decode_header(const uint8_t* p);

// The payload of (seed, conn, step): a splitmix64 stream, so that a receiver
// knows what it must get, and a swapped or stale message is caught too.
void fill_payload(uint8_t* out, size_t len, uint64_t seed, uint32_t conn, uint64_t step);

// FNV-1a over 8-byte little-endian words, then the bytes that remain: one
// multiply per 8 bytes, so that checksumming does not make the 2-core lab's
// benchmark measure the CPU instead of the rails (a byte at a time did).
// A message is added in one call.
class Fnv64 {
 public:
  void add(const uint8_t* p, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      h_ = (h_ ^ w) * 0x100000001b3ull;
    }
    for (; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

uint64_t payload_checksum(size_t len, uint64_t seed, uint32_t conn, uint64_t step);
// Whether p holds the payload of (seed, conn, step), compared as it is made.
bool payload_matches(const uint8_t* p, size_t len, uint64_t seed, uint32_t conn, uint64_t step);

// Expert popularity: the bytes of one step over `n` connections, connection i
// getting a share proportional to 1 / (rank + 1)^skew, where the ranks rotate
// by one every period (`phase` is how many periods have passed). Sums to
// total (the rounding goes to the first connection); skew 0: equal.
std::vector<uint32_t> skewed_sizes(uint64_t total, size_t n, double skew, uint64_t phase);

// How fast two rails can at best move one round of bursts (one direction of
// a step), in seconds: on rail0 alone; with every byte shared over both rails
// in the ratio of their rates (as an ideal multipath transport would); and
// with each burst whole on one rail, in the best split of the round (tried
// exhaustively over the first 16 bursts; any past them are counted on rail0,
// so with more than 16 that figure may be above the true floor). Rates in
// bits per second; other traffic is not counted, so these are floors, not
// predictions.
struct RoundFloor {
  double one_rail_s = 0;
  double shared_s = 0;
  double whole_bursts_s = 0;
};
RoundFloor round_floor(const std::vector<uint32_t>& bursts, double rail0_bps, double rail1_bps);

// "1MB", "64KiB", "512", "2GB" -> bytes (rates and durations use dualpath's
// own units: dp::parse_bandwidth, dp::parse_duration)
std::optional<uint64_t> parse_size(const std::string& s);

}  // namespace dpload

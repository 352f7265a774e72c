// SPDX-License-Identifier: Apache-2.0
// Token buckets per key (a source address, a pid): a burst, then a steady
// rate. What a peer may make the daemon do (answer a probe from the network,
// log an NCCL plugin's move) is bounded per source, so that a flood costs
// bounded work and one source cannot use up another's share. The table holds
// at most `max_keys`; a new key beyond that forgets the key heard from least
// recently (which starts with a full burst again if it comes back: the bound
// is the table's, the rate exact for the keys it holds). No I/O, no locks.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>

namespace dp {

// One token bucket: up to `burst` at once, then `per_second`, both given at
// each take (a rate that follows a negotiated interval may change).
struct TokenBucket {
  using Clock = std::chrono::steady_clock;
  double tokens = 0;
  Clock::time_point at{};

  // How many of `n` may go now; those are spent.
  int take(int n, double burst, double per_second, Clock::time_point now) {
    double elapsed = std::max(0.0, std::chrono::duration<double>(now - at).count());
    tokens = std::min(burst, tokens + elapsed * per_second);
    at = now;
    int can = static_cast<int>(std::min<double>(tokens, std::max(n, 0)));
    tokens -= can;
    return can;
  }
};

template <typename Key>
class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  RateLimiter(double burst, double per_second, size_t max_keys)
      : burst_(burst), per_second_(per_second), max_keys_(std::max<size_t>(max_keys, 1)) {}

  // How many of `n` the key may do now; those are spent.
  int take(const Key& k, int n, Clock::time_point now) {
    return bucket(k, now).take(n, burst_, per_second_, now);
  }
  bool allow(const Key& k, Clock::time_point now) { return take(k, 1, now) == 1; }
  size_t size() const { return buckets_.size(); }

 private:
  using Bucket = TokenBucket;
  Bucket& bucket(const Key& k, Clock::time_point now) {
    auto it = buckets_.find(k);
    if (it != buckets_.end()) return it->second;
    if (buckets_.size() >= max_keys_)
      buckets_.erase(
          std::min_element(buckets_.begin(), buckets_.end(),
                           [](const auto& a, const auto& b) { return a.second.at < b.second.at; }));
    return buckets_[k] = Bucket{burst_, now};
  }
  double burst_, per_second_;
  size_t max_keys_;
  std::map<Key, Bucket> buckets_;
};

}  // namespace dp

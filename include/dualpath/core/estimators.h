// SPDX-License-Identifier: Apache-2.0
// Estimators the daemon computes from cumulative kernel counters each tick.
// Pure code: time is passed in, nothing is read from the clock or the kernel.
// Every estimate says the window it covers and how many samples it rests on.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace dp {

using Clock = std::chrono::steady_clock;
using Nanos = std::chrono::nanoseconds;

// EWMA of the rate of a cumulative counter (bytes, packets). A counter that
// goes backwards (a reset) restarts the estimator instead of producing a
// negative or huge rate.
class RateEstimator {
 public:
  explicit RateEstimator(double weight = 0.2) : weight_(weight) {}
  void update(uint64_t counter, Clock::time_point t);
  double rate() const { return rate_; }       // units per second, smoothed
  double last_rate() const { return last_; }  // of the newest interval alone
  // The time constant of the smoothing: about tick / weight.
  Nanos window() const;
  bool valid() const { return samples_ >= 2; }

 private:
  double weight_;
  double rate_ = 0, last_ = 0;
  uint64_t prev_ = 0;
  Clock::time_point prev_t_{};
  Nanos interval_{0};
  uint64_t samples_ = 0;
};

// Log2 histogram buckets: bucket i counts values in [2^i, 2^(i+1)) of the
// histogram's unit (microseconds for RTT); bucket 0 also takes 0.
inline constexpr size_t kHistBuckets = 32;
using Histogram = std::array<uint64_t, kHistBuckets>;
int histogram_bucket(uint64_t value);
// The value below which a fraction q of the histogram's samples lie,
// interpolated linearly inside the bucket. nullopt for an empty histogram.
std::optional<double> histogram_quantile(const Histogram& h, double q);

struct Percentiles {
  double p50 = 0, p95 = 0, p99 = 0;
  uint64_t samples = 0;
  Nanos window{0};  // the span of time the samples come from
};

// Percentiles over a sliding window, from snapshots of a cumulative histogram
// (such as the one sockops keeps per rail): the window's histogram is the
// difference between the newest snapshot and the oldest one inside the window.
class WindowedHistogram {
 public:
  explicit WindowedHistogram(Nanos window) : window_(window) {}
  void update(const Histogram& cumulative, Clock::time_point t);
  std::optional<Percentiles> percentiles() const;

 private:
  Nanos window_;
  std::deque<std::pair<Clock::time_point, Histogram>> snaps_;
};

struct Ratio {
  double value = 0;  // numerator / denominator over the window
  uint64_t numerator = 0, denominator = 0;
  Nanos window{0};
};

// A ratio of two cumulative counters over a sliding window: loss as
// retransmitted segments over sent segments.
class WindowedRatio {
 public:
  explicit WindowedRatio(Nanos window) : window_(window) {}
  void update(uint64_t numerator, uint64_t denominator, Clock::time_point t);
  std::optional<Ratio> ratio() const;  // nullopt until two snapshots or no denominator

 private:
  struct Snap {
    Clock::time_point t;
    uint64_t num, den;
  };
  Nanos window_;
  std::deque<Snap> snaps_;
};

}  // namespace dp

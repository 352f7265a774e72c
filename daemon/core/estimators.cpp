// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/estimators.h"

#include <algorithm>
#include <bit>

namespace dp {

void RateEstimator::update(uint64_t counter, Clock::time_point t) {
  if (samples_ == 0 || counter < prev_ || t <= prev_t_) {
    // first sample, counter reset, or time did not advance: restart
    if (samples_ != 0 && counter < prev_) samples_ = 0;
    prev_ = counter;
    prev_t_ = t;
    samples_ = samples_ == 0 ? 1 : samples_;
    return;
  }
  double dt = std::chrono::duration<double>(t - prev_t_).count();
  last_ = static_cast<double>(counter - prev_) / dt;
  rate_ = samples_ == 1 ? last_ : weight_ * last_ + (1 - weight_) * rate_;
  interval_ = std::chrono::duration_cast<Nanos>(t - prev_t_);
  prev_ = counter;
  prev_t_ = t;
  ++samples_;
}

Nanos RateEstimator::window() const {
  return Nanos(static_cast<int64_t>(static_cast<double>(interval_.count()) / weight_));
}

int histogram_bucket(uint64_t value) {
  if (value == 0) return 0;
  int b = 63 - std::countl_zero(value);
  return std::min(b, static_cast<int>(kHistBuckets) - 1);
}

std::optional<double> histogram_quantile(const Histogram& h, double q) {
  uint64_t total = 0;
  for (auto c : h) total += c;
  if (total == 0) return std::nullopt;
  double rank = q * static_cast<double>(total);
  double seen = 0;
  for (size_t i = 0; i < h.size(); ++i) {
    if (h[i] == 0) continue;
    double next = seen + static_cast<double>(h[i]);
    if (rank <= next) {
      double lo = i == 0 ? 0 : static_cast<double>(1ull << i);
      double hi = static_cast<double>(1ull << (i + 1));
      double frac = (rank - seen) / static_cast<double>(h[i]);
      return lo + frac * (hi - lo);
    }
    seen = next;
  }
  return static_cast<double>(1ull << h.size());
}

void WindowedHistogram::update(const Histogram& cumulative, Clock::time_point t) {
  if (!snaps_.empty()) {
    // a counter that went backwards (map recreated): start over
    const auto& last = snaps_.back().second;
    for (size_t i = 0; i < kHistBuckets; ++i)
      if (cumulative[i] < last[i]) {
        snaps_.clear();
        break;
      }
  }
  snaps_.emplace_back(t, cumulative);
  // keep exactly one snapshot at or before the window's start
  while (snaps_.size() > 2 && snaps_[1].first <= t - window_) snaps_.pop_front();
}

std::optional<Percentiles> WindowedHistogram::percentiles() const {
  if (snaps_.size() < 2) return std::nullopt;
  const auto& [t0, h0] = snaps_.front();
  const auto& [t1, h1] = snaps_.back();
  Histogram d{};
  Percentiles p;
  for (size_t i = 0; i < kHistBuckets; ++i) {
    d[i] = h1[i] - h0[i];
    p.samples += d[i];
  }
  if (p.samples == 0) return std::nullopt;
  p.p50 = *histogram_quantile(d, 0.50);
  p.p95 = *histogram_quantile(d, 0.95);
  p.p99 = *histogram_quantile(d, 0.99);
  p.window = std::chrono::duration_cast<Nanos>(t1 - t0);
  return p;
}

void WindowedRatio::update(uint64_t numerator, uint64_t denominator, Clock::time_point t) {
  if (!snaps_.empty() && (numerator < snaps_.back().num || denominator < snaps_.back().den))
    snaps_.clear();
  snaps_.push_back({t, numerator, denominator});
  while (snaps_.size() > 2 && snaps_[1].t <= t - window_) snaps_.pop_front();
}

std::optional<Ratio> WindowedRatio::ratio() const {
  if (snaps_.size() < 2) return std::nullopt;
  const Snap& a = snaps_.front();
  const Snap& b = snaps_.back();
  Ratio r;
  r.numerator = b.num - a.num;
  r.denominator = b.den - a.den;
  if (r.denominator == 0) return std::nullopt;
  r.value = static_cast<double>(r.numerator) / static_cast<double>(r.denominator);
  r.window = std::chrono::duration_cast<Nanos>(b.t - a.t);
  return r;
}

}  // namespace dp

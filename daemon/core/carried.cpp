// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/carried.h"

#include <cmath>
#include <cstdlib>

#include "dualpath/abi.h"

namespace dp {

namespace {
bool moved(const std::vector<uint16_t>& from, const std::vector<uint16_t>& to) {
  if (from.size() != to.size()) return true;
  for (size_t p = 0; p < from.size(); ++p)
    if (std::abs(int{from[p]} - int{to[p]}) > DP_SHARE_SCALE / 20) return true;
  return false;
}
}  // namespace

void CarriedShares::observe(const std::vector<std::vector<uint16_t>>& decided,
                            const std::vector<std::vector<uint64_t>>& tx, Clock::time_point now) {
  classes_.resize(decided.size());
  for (size_t c = 0; c < decided.size() && c < tx.size(); ++c) {
    Class& k = classes_[c];
    // a new decision (or another set of paths) starts a new count; one
    // within 5 points of the last on every path is the same decision
    if (moved(k.decided, decided[c]) ||
        (!k.samples.empty() && k.samples.back().tx.size() != tx[c].size())) {
      k.decided = decided[c];
      k.samples.clear();
    }
    // counters that went back (a datapath loaded afresh) start over too
    if (!k.samples.empty())
      for (size_t p = 0; p < tx[c].size(); ++p)
        if (tx[c][p] < k.samples.back().tx[p]) {
          k.samples.clear();
          break;
        }
    if (k.samples.size() >= 2 && now - k.samples[k.samples.size() - 2].t < std::chrono::seconds(1))
      k.samples.back() = {now, tx[c]};  // the newest within a second: replaced
    else
      k.samples.push_back({now, tx[c]});
    while (k.samples.size() > 2 && now - k.samples[1].t >= kWindow) k.samples.pop_front();
  }
}

std::optional<CarriedShares::Carried> CarriedShares::carried(size_t klass) const {
  if (klass >= classes_.size() || classes_[klass].samples.size() < 2) return std::nullopt;
  const auto& first = classes_[klass].samples.front();
  const auto& last = classes_[klass].samples.back();
  Carried out;
  out.share.assign(last.tx.size(), 0);
  for (size_t p = 0; p < last.tx.size(); ++p) out.bytes += last.tx[p] - first.tx[p];
  if (out.bytes < kMinBytes) return std::nullopt;
  for (size_t p = 0; p < last.tx.size(); ++p)
    out.share[p] =
        static_cast<uint16_t>(std::lround(static_cast<double>(last.tx[p] - first.tx[p]) *
                                          DP_SHARE_SCALE / static_cast<double>(out.bytes)));
  out.seconds = std::chrono::duration<double>(last.t - first.t).count();
  return out;
}

}  // namespace dp

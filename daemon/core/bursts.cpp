// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/bursts.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace dp {

namespace {
// A flow moves only when its path would finish more than this much later
// than the best one: a burst plan that flips between two near-equal answers
// every tick would move flows for nothing.
constexpr double kKeepWithin = 1.05;

BurstSizes::Key key_of(const dp_flow_key& key) {
  BurstSizes::Key k;
  std::memcpy(k.data(), &key, sizeof(key));
  return k;
}
}  // namespace

BurstPlan plan_bursts(const std::vector<BurstFlow>& flows,
                      const std::vector<std::vector<bool>>& allowed,
                      const std::vector<int>& priority, const std::vector<double>& left_bps) {
  const size_t P = left_bps.size();
  BurstPlan out;
  out.path.assign(flows.size(), BurstPlan::kNone);
  out.finish_s.assign(P, 0);
  std::vector<size_t> order(flows.size());
  std::iota(order.begin(), order.end(), 0);
  auto prio = [&](size_t i) {
    return flows[i].klass < priority.size() ? priority[flows[i].klass] : 0;
  };
  // higher priority first; then largest first (LPT): the small bursts fill
  // in what the large ones leave
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (prio(a) != prio(b)) return prio(a) > prio(b);
    return flows[a].burst > flows[b].burst;
  });
  for (size_t i : order) {
    const BurstFlow& f = flows[i];
    if (f.klass >= allowed.size()) continue;
    size_t best = BurstPlan::kNone;
    double best_t = 0, here_t = -1;
    for (size_t p = 0; p < P; ++p) {
      if (p >= allowed[f.klass].size() || !allowed[f.klass][p] || left_bps[p] <= 0) continue;
      double t = out.finish_s[p] + static_cast<double>(f.burst) * 8 / left_bps[p];
      if (p == f.path) here_t = t;
      if (best == BurstPlan::kNone || t < best_t) best = p, best_t = t;
    }
    if (best == BurstPlan::kNone) continue;
    if (here_t >= 0 && here_t <= best_t * kKeepWithin) best = f.path, best_t = here_t;
    out.path[i] = best;
    out.finish_s[best] = best_t;
  }
  return out;
}

uint64_t BurstSizes::expect(const dp_flow_key& key, uint64_t measured, Clock::time_point now) {
  const auto bytes = static_cast<double>(measured);
  auto [it, fresh] = seen_.try_emplace(key_of(key), Seen{bytes, now});
  Seen& s = it->second;
  if (!fresh) {
    double aged = 0;
    if (half_life_.count() > 0)
      aged = s.bytes *
             std::exp2(-std::max(std::chrono::duration<double>(now - s.at) / half_life_, 0.0));
    s = {std::max(aged, bytes), now};
  }
  return static_cast<uint64_t>(s.bytes);
}

std::optional<uint64_t> BurstSizes::last(const dp_flow_key& key) const {
  auto it = seen_.find(key_of(key));
  if (it == seen_.end()) return std::nullopt;
  return static_cast<uint64_t>(it->second.bytes);
}

void BurstSizes::forget_idle(Clock::time_point now) {
  const auto idle = 16 * half_life_;
  std::erase_if(seen_, [&](const auto& e) { return now - e.second.at > idle; });
}

}  // namespace dp

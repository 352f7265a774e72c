// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/scheduler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "dualpath/abi.h"
#include "dualpath/core/units.h"

namespace dp {
namespace {

constexpr int kScale = DP_SHARE_SCALE;
// An elastic class comes back to its preferred rail only when the rail would
// stay this far below the threshold with the class's whole demand on it.
constexpr double kReturnMargin = 0.10;
// Share changes smaller than this are not worth a move.
constexpr int kMinChange = kScale / 50;

Shares whole_on(size_t rails, size_t r) {
  Shares s(rails, 0);
  s[r] = kScale;
  return s;
}

// Fractions (summing to ~1) to integer shares summing to kScale exactly.
Shares quantize(const std::vector<double>& f) {
  Shares s(f.size(), 0);
  int total = 0;
  std::vector<std::pair<double, size_t>> rem;
  for (size_t i = 0; i < f.size(); ++i) {
    double v = std::max(0.0, f[i]) * kScale;
    s[i] = static_cast<uint16_t>(std::floor(v));
    total += s[i];
    rem.push_back({v - std::floor(v), i});
  }
  std::sort(rem.begin(), rem.end(), [](auto& a, auto& b) { return a.first > b.first; });
  for (size_t k = 0; total < kScale && !rem.empty(); ++k, ++total)
    s[rem[k % rem.size()].second] += 1;
  return s;
}

std::string pct(double f) { return fmt::format("{:.0f}%", f * 100); }
std::string ms(double us) { return fmt::format("{:.2f} ms", us / 1000); }

size_t argmax(const Shares& s) {
  return static_cast<size_t>(std::max_element(s.begin(), s.end()) - s.begin());
}

}  // namespace

void PeakWindow::add(SchedClock::time_point t, double v, SchedClock::duration keep) {
  // a sample no higher than a newer one can never be the peak again
  while (!samples_.empty() && samples_.back().second <= v) samples_.pop_back();
  samples_.push_back({t, v});
  while (!samples_.empty() && samples_.front().first < t - keep) samples_.pop_front();
}

double PeakWindow::peak(SchedClock::time_point now, SchedClock::duration window) const {
  if (window <= SchedClock::duration::zero()) return samples_.empty() ? 0 : samples_.back().second;
  for (auto& [t, v] : samples_)
    if (t > now - window)
      return v;  // samples_ falls with time: the first in the window is its peak
  return 0;
}

std::string format_shares(const Policy& p, const Shares& s) {
  std::string out;
  for (size_t r = 0; r < s.size() && r < p.paths.size(); ++r) {
    if (!s[r]) continue;
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", p.paths[r].name,
                       pct(s[r] / double(kScale)));
  }
  return out.empty() ? "none" : out;
}

SchedulerState initial_state(const Policy& p) {
  SchedulerState st;
  for (auto& c : p.classes) {
    ClassState cs;
    cs.shares = whole_on(p.paths.size(), static_cast<size_t>(p.path_index(c.prefer)));
    st.classes.push_back(std::move(cs));
  }
  st.rails.resize(p.paths.size());
  return st;
}

SchedulerResult schedule(const Policy& p, const SchedulerInput& in, const SchedulerState& prev) {
  const auto& k = p.scheduler;
  const size_t R = p.paths.size(), C = p.classes.size();
  SchedulerResult out;
  out.state = prev.classes.size() == C ? prev : initial_state(p);
  for (auto& cs : out.state.classes)
    if (cs.shares.size() != R)
      cs.shares = whole_on(R, argmax(cs.shares) < R ? argmax(cs.shares) : 0);

  // Peaks: spills look at the highest per-tick figure of the last
  // peak_window, returns at the highest of the last `hold`.
  const auto peak_w = std::chrono::duration_cast<SchedClock::duration>(k.peak_window);
  const auto hold_w = std::chrono::duration_cast<SchedClock::duration>(k.hold);
  const auto keep = std::max(peak_w, hold_w);
  auto peak_words = [&](double u) {
    return k.peak_window.count() > 0
               ? fmt::format("peaked at {:.2f} in the last {}", u, format_duration(k.peak_window))
               : fmt::format("{:.2f}", u);
  };
  out.state.rails.resize(R);
  std::vector<bool> up(R, true);
  std::vector<double> proj(R, 0), cap(R, 0), util_hold(R, 0);
  for (size_t r = 0; r < R; ++r) {
    if (r < in.rails.size()) {
      up[r] = in.rails[r].healthy;
      out.state.rails[r].add(in.now, in.rails[r].utilisation, keep);
    }
    proj[r] = out.state.rails[r].peak(in.now, peak_w);
    util_hold[r] = out.state.rails[r].peak(in.now, hold_w);
    cap[r] = static_cast<double>(p.paths[r].capacity_bps);
  }
  for (size_t c = 0; c < C; ++c)
    out.state.classes[c].demand.add(in.now, c < in.demand_bps.size() ? in.demand_bps[c] : 0, keep);
  if (std::none_of(up.begin(), up.end(), [](bool b) { return b; }))
    return out;  // keep the last decisions
  auto rtt = [&](size_t r) { return r < in.rails.size() ? in.rails[r].rtt_us : std::nullopt; };
  const double tol_us = std::chrono::duration<double, std::micro>(k.latency_tolerance).count();
  const double dead_us = std::chrono::duration<double, std::micro>(k.dead_zone).count();
  const double thr = k.load_threshold;

  // Healthy rail with the lowest RTT; differences inside the dead zone count
  // as equal and then the preferred rail wins.
  auto best_rail = [&](size_t preferred) {
    size_t best = up[preferred] ? preferred : R;
    for (size_t r = 0; r < R; ++r) {
      if (!up[r]) continue;
      if (best == R) {
        best = r;
        continue;
      }
      auto a = rtt(r), b = rtt(best);
      if (a && b && *a + dead_us < *b) best = r;
    }
    return best;
  };

  // Latency-sensitive classes first, highest priority first; then elastic
  // classes, lowest priority first: they yield first when rails are hot.
  std::vector<size_t> order(C);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &ca = p.classes[a], &cb = p.classes[b];
    bool la = ca.kind == ClassKind::LatencySensitive, lb = cb.kind == ClassKind::LatencySensitive;
    if (la != lb) return la;
    return la ? ca.priority > cb.priority : ca.priority < cb.priority;
  });

  bool rebalanced = false;  // when every rail is hot, one class yields per tick
  for (size_t c : order) {
    const auto& cls = p.classes[c];
    auto& st = out.state.classes[c];
    const Shares before = st.shares;
    bool pinned = cls.pinned || (c < in.operator_pinned.size() && in.operator_pinned[c]);
    if (pinned) continue;  // the scheduler never moves a pinned class
    const size_t pref = static_cast<size_t>(p.path_index(cls.prefer));
    // placed by cells or bursts while split (the datapath's dp_cells): see
    // plan_cells() and plan_bursts()
    const bool by_cells = p.topology == Topology::Shared &&
                          (k.flowcell != 0 || k.burst_placement) && cls.kind == ClassKind::Elastic;
    // the class's demand at its peaks: of the short window for a spill,
    // of the hold window for a return
    const double demand = st.demand.peak(in.now, peak_w);
    const double demand_hold = st.demand.peak(in.now, hold_w);
    bool cooled = !st.last_change || in.now - *st.last_change >= k.cooldown;
    Shares after = before;
    std::string kind, reason;

    auto on_down = std::find_if(before.begin(), before.end(),
                                [&, r = size_t(0)](uint16_t s) mutable { return s && !up[r++]; });
    if (on_down != before.end()) {
      // a down rail never keeps a share; this ignores the cooldown
      size_t dead = static_cast<size_t>(on_down - before.begin());
      size_t to = best_rail(pref);
      after = whole_on(R, to);
      kind = "down";
      reason =
          fmt::format("{} is down: {} moves to {}", p.paths[dead].name, cls.name, p.paths[to].name);
    } else if (cls.kind == ClassKind::LatencySensitive) {
      size_t cur = argmax(before), best = best_rail(pref);
      auto rc = rtt(cur), rb = rtt(best);
      if (best != cur && rc && rb && cooled) {
        double diff = *rc - *rb;
        if (diff > tol_us && diff > dead_us) {
          after = whole_on(R, best);
          kind = "latency";
          reason = fmt::format("{} p50 RTT {} is {} above {}'s {} (tolerance {}): move {} to {}",
                               p.paths[cur].name, ms(*rc), ms(diff), p.paths[best].name, ms(*rb),
                               format_duration(k.latency_tolerance), cls.name, p.paths[best].name);
        }
      }
    } else if (demand_hold > 0 || before[pref] < kScale) {
      double on_pref = before[pref] / double(kScale);
      if (up[pref] && proj[pref] > thr && on_pref > 0 && demand > 0) {
        double excess = (proj[pref] - thr) * cap[pref];
        double movable = demand * on_pref;
        std::vector<double> spare(R, 0);
        double total_spare = 0;
        for (size_t r = 0; r < R; ++r)
          if (r != pref && up[r]) total_spare += spare[r] = std::max(0.0, thr - proj[r]) * cap[r];
        std::vector<double> f(R, 0);
        for (size_t r = 0; r < R; ++r) f[r] = before[r] / double(kScale);
        if (total_spare > 0) {
          // spill the excess onto spare capacity below the threshold, in proportion to it
          double move = std::min({excess, movable, total_spare});
          f[pref] -= move / demand;
          for (size_t r = 0; r < R; ++r)
            if (spare[r] > 0) f[r] += move / demand * spare[r] / total_spare;
          kind = "spill";
          reason = fmt::format("{} utilisation {} > threshold {:.2f}: spill {} of {} to {}",
                               p.paths[pref].name, peak_words(proj[pref]), thr, pct(move / demand),
                               cls.name, p.paths[(pref + 1) % R].name);
        } else if (rebalanced || by_cells) {
          // a lower-priority class already yielded this tick; or the class
          // is placed by cells, which already finish its bursts where they
          // can: opening rails with no spare capacity at their peaks only
          // puts it in the way of the classes those rails carry
          continue;
        } else {
          // every rail is above the threshold: split by capacity, so a burst
          // over unequal rails finishes on all of them at once. Only the
          // lowest-priority class that still needs to yields this tick; the
          // next one yields on a later tick if the rails are still hot.
          rebalanced = true;
          double total_cap = 0;
          for (size_t r = 0; r < R; ++r) total_cap += up[r] ? cap[r] : 0;
          for (size_t r = 0; r < R; ++r) f[r] = up[r] ? cap[r] / total_cap : 0;
          kind = "rebalance";
          reason = fmt::format(
              "every rail is above the threshold {:.2f} ({} at {:.2f}): split {} by capacity", thr,
              p.paths[pref].name, proj[pref], cls.name);
        }
        if (by_cells) {
          // cells go where they finish first: a spill opens to the class the
          // rails with spare capacity at their peaks (shares by capacity,
          // which cells do not read), and the preferred rail keeps taking
          // the cells it finishes first
          double total_cap = cap[pref];
          for (size_t r = 0; r < R; ++r)
            if (r != pref && spare[r] > 0) total_cap += cap[r];
          for (size_t r = 0; r < R; ++r) f[r] = r == pref || spare[r] > 0 ? cap[r] / total_cap : 0;
          reason = fmt::format("{} utilisation {} > threshold {:.2f}: {} spills by {}",
                               p.paths[pref].name, peak_words(proj[pref]), thr, cls.name,
                               k.burst_placement
                                   ? "bursts, planned so that a round of them finishes soonest"
                                   : "cells, each on the rail where it finishes first");
        }
        Shares q = quantize(f);
        int change = std::abs(int(q[pref]) - int(before[pref]));
        if (cooled && change >= kMinChange) {
          after = q;
          // later (higher-priority) classes see the load this one moved
          for (size_t r = 0; r < R; ++r)
            if (cap[r] > 0) proj[r] += demand * (q[r] - before[r]) / double(kScale) / cap[r];
        }
      } else if (on_pref < 1 && up[pref]) {
        // hold on demand: back only when the peaks of the whole hold window,
        // the class's included, fit under the threshold with a margin
        double back = demand_hold * (1 - on_pref);
        double would_be = util_hold[pref] + back / cap[pref];
        if (cooled && would_be < thr - kReturnMargin) {
          after = whole_on(R, pref);
          for (size_t r = 0; r < R; ++r)
            if (cap[r] > 0) proj[r] += demand * (after[r] - before[r]) / double(kScale) / cap[r];
          kind = "return";
          reason = fmt::format(
              "{} would be at {:.2f} with all of {} back{} (< {:.2f} = threshold - {:.2f}): "
              "return {} to {}",
              p.paths[pref].name, would_be, cls.name,
              k.hold.count() > 0
                  ? fmt::format(" at the peaks of the last {}", format_duration(k.hold))
                  : "",
              thr - kReturnMargin, kReturnMargin, cls.name, p.paths[pref].name);
        }
      }
    }
    if (after != before) {
      st.shares = after;
      st.last_change = in.now;
      out.events.push_back({in.now, cls.name, before, after, kind, reason, ""});
    }
  }
  return out;
}

std::chrono::nanoseconds effective_flowlet_gap(
    std::chrono::nanoseconds policy_gap, const std::vector<std::optional<double>>& rtt_p50_us) {
  if (policy_gap.count() == 0) return policy_gap;
  std::optional<double> lo, hi;
  for (const auto& r : rtt_p50_us) {
    if (!r) continue;
    lo = lo ? std::min(*lo, *r) : *r;
    hi = hi ? std::max(*hi, *r) : *r;
  }
  if (!lo || !hi) return policy_gap;
  auto diff = std::chrono::nanoseconds(static_cast<int64_t>((*hi - *lo) * 1000));
  return std::max(policy_gap, std::min(diff, kMaxFlowletGap));
}

}  // namespace dp

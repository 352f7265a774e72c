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

namespace {

// One tick's view of the rails, shared by the decisions for every class.
// proj (utilisation at the peaks of the short window) grows as classes move
// load, so that later classes see what earlier ones moved; rebalanced
// records that a class already yielded this tick to an all-hot rebalance.
struct SchedTick {
  const Policy& p;
  const SchedulerSettings& k;
  const SchedulerInput& in;
  size_t R;
  SchedClock::duration peak_w, hold_w;
  std::vector<bool> up;
  std::vector<double> proj, cap, util_hold;
  double tol_us, dead_us, thr;
  bool rebalanced = false;

  std::optional<double> rtt(size_t r) const {
    return r < in.rails.size() ? in.rails[r].rtt_us : std::nullopt;
  }

  // Healthy rail with the lowest RTT; differences inside the dead zone count
  // as equal and then the preferred rail wins.
  size_t best_rail(size_t preferred) const {
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
  }

  std::string peak_words(double u) const {
    return k.peak_window.count() > 0
               ? fmt::format("peaked at {:.2f} in the last {}", u, format_duration(k.peak_window))
               : fmt::format("{:.2f}", u);
  }

  // Later (higher-priority) classes see the load a class moved.
  void account_move(double demand, const Shares& before, const Shares& after) {
    for (size_t r = 0; r < R; ++r)
      if (cap[r] > 0) proj[r] += demand * (after[r] - before[r]) / double(kScale) / cap[r];
  }
};

// One class's decision this tick: its new shares, and why they changed.
struct ClassDecision {
  Shares after;
  std::string kind, reason;
};

// The previous state, or a fresh one when the policy's classes changed; a
// class whose shares are for another number of rails goes whole onto its
// largest share's rail.
SchedulerState carried_state(const Policy& p, const SchedulerState& prev) {
  const size_t R = p.paths.size();
  SchedulerState st = prev.classes.size() == p.classes.size() ? prev : initial_state(p);
  for (auto& cs : st.classes)
    if (cs.shares.size() != R)
      cs.shares = whole_on(R, argmax(cs.shares) < R ? argmax(cs.shares) : 0);
  return st;
}

// Records this tick's rail utilisation and class demand in the state's peak
// windows, and reads the rails' peaks: spills look at the highest per-tick
// figure of the last peak_window, returns at the highest of the last `hold`.
SchedTick observe_rails(const Policy& p, const SchedulerInput& in, SchedulerState& state) {
  const auto& k = p.scheduler;
  const size_t R = p.paths.size();
  const auto peak_w = std::chrono::duration_cast<SchedClock::duration>(k.peak_window);
  const auto hold_w = std::chrono::duration_cast<SchedClock::duration>(k.hold);
  const auto keep = std::max(peak_w, hold_w);
  SchedTick t{p,
              k,
              in,
              R,
              peak_w,
              hold_w,
              std::vector<bool>(R, true),
              std::vector<double>(R, 0),
              std::vector<double>(R, 0),
              std::vector<double>(R, 0),
              std::chrono::duration<double, std::micro>(k.latency_tolerance).count(),
              std::chrono::duration<double, std::micro>(k.dead_zone).count(),
              k.load_threshold,
              false};
  state.rails.resize(R);
  for (size_t r = 0; r < R; ++r) {
    if (r < in.rails.size()) {
      t.up[r] = in.rails[r].healthy;
      state.rails[r].add(in.now, in.rails[r].utilisation, keep);
    }
    t.proj[r] = state.rails[r].peak(in.now, peak_w);
    t.util_hold[r] = state.rails[r].peak(in.now, hold_w);
    t.cap[r] = static_cast<double>(p.paths[r].capacity_bps);
  }
  for (size_t c = 0; c < p.classes.size(); ++c)
    state.classes[c].demand.add(in.now, c < in.demand_bps.size() ? in.demand_bps[c] : 0, keep);
  return t;
}

// Latency-sensitive classes first, highest priority first; then elastic
// classes, lowest priority first: they yield first when rails are hot.
std::vector<size_t> decision_order(const Policy& p) {
  std::vector<size_t> order(p.classes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto &ca = p.classes[a], &cb = p.classes[b];
    bool la = ca.kind == ClassKind::LatencySensitive, lb = cb.kind == ClassKind::LatencySensitive;
    if (la != lb) return la;
    return la ? ca.priority > cb.priority : ca.priority < cb.priority;
  });
  return order;
}

// A latency-sensitive class moves whole to the rail with the lowest RTT when
// its own is slower by more than the tolerance and the dead zone.
void decide_latency(const SchedTick& t, const ClassSpec& cls, const Shares& before, size_t pref,
                    bool cooled, ClassDecision& d) {
  const auto& p = t.p;
  size_t cur = argmax(before), best = t.best_rail(pref);
  auto rc = t.rtt(cur), rb = t.rtt(best);
  if (best == cur || !rc || !rb || !cooled) return;
  double diff = *rc - *rb;
  if (diff > t.tol_us && diff > t.dead_us) {
    d.after = whole_on(t.R, best);
    d.kind = "latency";
    d.reason = fmt::format("{} p50 RTT {} is {} above {}'s {} (tolerance {}): move {} to {}",
                           p.paths[cur].name, ms(*rc), ms(diff), p.paths[best].name, ms(*rb),
                           format_duration(t.k.latency_tolerance), cls.name, p.paths[best].name);
  }
}

// A class placed by cells spills differently: cells go where they finish
// first, so a spill opens to the class the rails with spare capacity at
// their peaks (shares by capacity, which cells do not read), and the
// preferred rail keeps taking the cells it finishes first.
void spill_by_cells(const SchedTick& t, const ClassSpec& cls, size_t pref,
                    const std::vector<double>& spare, std::vector<double>& f, ClassDecision& d) {
  const auto& p = t.p;
  double total_cap = t.cap[pref];
  for (size_t r = 0; r < t.R; ++r)
    if (r != pref && spare[r] > 0) total_cap += t.cap[r];
  for (size_t r = 0; r < t.R; ++r) f[r] = r == pref || spare[r] > 0 ? t.cap[r] / total_cap : 0;
  d.reason =
      fmt::format("{} utilisation {} > threshold {:.2f}: {} spills by {}", p.paths[pref].name,
                  t.peak_words(t.proj[pref]), t.thr, cls.name,
                  t.k.burst_placement ? "bursts, planned so that a round of them finishes soonest"
                                      : "cells, each on the rail where it finishes first");
}

// The preferred rail runs above the threshold: spill the excess onto rails
// with spare capacity, or, when every rail is hot, split by capacity.
void decide_spill(SchedTick& t, const ClassSpec& cls, const Shares& before, size_t pref,
                  double demand, bool by_cells, bool cooled, ClassDecision& d) {
  const auto& p = t.p;
  const size_t R = t.R;
  double on_pref = before[pref] / double(kScale);
  double excess = (t.proj[pref] - t.thr) * t.cap[pref];
  double movable = demand * on_pref;
  std::vector<double> spare(R, 0);
  double total_spare = 0;
  for (size_t r = 0; r < R; ++r)
    if (r != pref && t.up[r]) total_spare += spare[r] = std::max(0.0, t.thr - t.proj[r]) * t.cap[r];
  std::vector<double> f(R, 0);
  for (size_t r = 0; r < R; ++r) f[r] = before[r] / double(kScale);
  if (total_spare > 0) {
    // spill the excess onto spare capacity below the threshold, in proportion to it
    double move = std::min({excess, movable, total_spare});
    f[pref] -= move / demand;
    for (size_t r = 0; r < R; ++r)
      if (spare[r] > 0) f[r] += move / demand * spare[r] / total_spare;
    d.kind = "spill";
    d.reason = fmt::format("{} utilisation {} > threshold {:.2f}: spill {} of {} to {}",
                           p.paths[pref].name, t.peak_words(t.proj[pref]), t.thr,
                           pct(move / demand), cls.name, p.paths[(pref + 1) % R].name);
  } else if (t.rebalanced || by_cells) {
    // a lower-priority class already yielded this tick; or the class
    // is placed by cells, which already finish its bursts where they
    // can: opening rails with no spare capacity at their peaks only
    // puts it in the way of the classes those rails carry
    return;
  } else {
    // every rail is above the threshold: split by capacity, so a burst
    // over unequal rails finishes on all of them at once. Only the
    // lowest-priority class that still needs to yields this tick; the
    // next one yields on a later tick if the rails are still hot.
    t.rebalanced = true;
    double total_cap = 0;
    for (size_t r = 0; r < R; ++r) total_cap += t.up[r] ? t.cap[r] : 0;
    for (size_t r = 0; r < R; ++r) f[r] = t.up[r] ? t.cap[r] / total_cap : 0;
    d.kind = "rebalance";
    d.reason =
        fmt::format("every rail is above the threshold {:.2f} ({} at {:.2f}): split {} by capacity",
                    t.thr, p.paths[pref].name, t.proj[pref], cls.name);
  }
  if (by_cells) spill_by_cells(t, cls, pref, spare, f, d);
  Shares q = quantize(f);
  int change = std::abs(int(q[pref]) - int(before[pref]));
  if (cooled && change >= kMinChange) {
    d.after = q;
    t.account_move(demand, before, q);
  }
}

// Hold on demand: the class goes back to its preferred rail only when the
// peaks of the whole hold window, the class's included, fit under the
// threshold with a margin.
void decide_return(SchedTick& t, const ClassSpec& cls, const Shares& before, size_t pref,
                   double demand, double demand_hold, bool cooled, ClassDecision& d) {
  const auto& p = t.p;
  const auto& k = t.k;
  double on_pref = before[pref] / double(kScale);
  double back = demand_hold * (1 - on_pref);
  double would_be = t.util_hold[pref] + back / t.cap[pref];
  const double margin = k.return_margin;
  if (!(cooled && would_be < t.thr - margin)) return;  // a NaN stays where it is
  d.after = whole_on(t.R, pref);
  t.account_move(demand, before, d.after);
  d.kind = "return";
  d.reason = fmt::format(
      "{} would be at {:.2f} with all of {} back{} (< {:.2f} = threshold - {:.2f}): "
      "return {} to {}",
      p.paths[pref].name, would_be, cls.name,
      k.hold.count() > 0 ? fmt::format(" at the peaks of the last {}", format_duration(k.hold))
                         : "",
      t.thr - margin, margin, cls.name, p.paths[pref].name);
}

// An elastic class spills off its preferred rail when that runs hot and
// returns to it when it has cooled; one with no demand on its preferred
// rail whole is left alone.
void decide_elastic(SchedTick& t, const ClassSpec& cls, const ClassState& st, const Shares& before,
                    size_t pref, bool by_cells, bool cooled, ClassDecision& d) {
  // the class's demand at its peaks: of the short window for a spill,
  // of the hold window for a return
  const double demand = st.demand.peak(t.in.now, t.peak_w);
  const double demand_hold = st.demand.peak(t.in.now, t.hold_w);
  if (!(demand_hold > 0 || before[pref] < kScale)) return;
  double on_pref = before[pref] / double(kScale);
  if (t.up[pref] && t.proj[pref] > t.thr && on_pref > 0 && demand > 0)
    decide_spill(t, cls, before, pref, demand, by_cells, cooled, d);
  else if (on_pref < 1 && t.up[pref])
    decide_return(t, cls, before, pref, demand, demand_hold, cooled, d);
}

}  // namespace

SchedulerResult schedule(const Policy& p, const SchedulerInput& in, const SchedulerState& prev) {
  const auto& k = p.scheduler;
  SchedulerResult out;
  out.state = carried_state(p, prev);
  SchedTick t = observe_rails(p, in, out.state);
  if (std::none_of(t.up.begin(), t.up.end(), [](bool b) { return b; }))
    return out;  // keep the last decisions

  for (size_t c : decision_order(p)) {
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
    bool cooled = !st.last_change || in.now - *st.last_change >= k.cooldown;
    ClassDecision d{before, {}, {}};

    auto on_down = std::find_if(before.begin(), before.end(),
                                [&, r = size_t(0)](uint16_t s) mutable { return s && !t.up[r++]; });
    if (on_down != before.end()) {
      // a down rail never keeps a share; this ignores the cooldown
      size_t dead = static_cast<size_t>(on_down - before.begin());
      size_t to = t.best_rail(pref);
      d.after = whole_on(t.R, to);
      d.kind = "down";
      d.reason =
          fmt::format("{} is down: {} moves to {}", p.paths[dead].name, cls.name, p.paths[to].name);
    } else if (cls.kind == ClassKind::LatencySensitive) {
      decide_latency(t, cls, before, pref, cooled, d);
    } else {
      decide_elastic(t, cls, st, before, pref, by_cells, cooled, d);
    }
    if (d.after != before) {
      st.shares = d.after;
      st.last_change = in.now;
      out.events.push_back({in.now, cls.name, before, d.after, d.kind, d.reason, ""});
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

// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/controller.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "dualpath/abi.h"
#include "dualpath/core/encode.h"
#include "dualpath/core/units.h"

namespace dp {

namespace {

Shares all_on(size_t paths, size_t path) {
  Shares s(paths, 0);
  s.at(path) = DP_SHARE_SCALE;
  return s;
}

}  // namespace

std::string rail_key(const Policy& p, size_t path) {
  const auto& ps = p.paths.at(path);
  auto peer = p.health.bfd ? ps.bfd_address() : std::nullopt;
  return ps.name + "|" + ps.interface + "|" + (peer ? peer->str() : "");
}

uint64_t rail_key_hash(const Policy& p, size_t path) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (unsigned char ch : rail_key(p, path)) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

void Controller::set_policy(const Policy& next, const std::vector<bool>& carrier,
                            const std::vector<bool>& route_around, const std::vector<Pin>& pins,
                            Time now) {
  const size_t P = next.paths.size(), C = next.classes.size();
  sched_ = initial_state(next);
  op_pinned_.assign(C, false);
  demand_.assign(C, RateEstimator(next.scheduler.ewma_weight));
  for (const auto& pin : pins) {
    op_pinned_.at(pin.klass) = true;  // an operator's pin survives the reload or restart
    if (pin.path) sched_.classes.at(pin.klass).shares = all_on(P, *pin.path);
  }
  std::vector<Path> old;
  old.swap(paths_);
  // a kept rail's way back (its classes' former shares) goes by class name
  auto former_of = [&](const std::vector<double>& was) {
    std::vector<double> out(C, 0);
    for (size_t c = 0; c < C; ++c) {
      int i = policy_.class_index(next.classes[c].name);
      if (i >= 0 && static_cast<size_t>(i) < was.size()) out[c] = was[static_cast<size_t>(i)];
    }
    return out;
  };
  for (size_t i = 0; i < P; ++i) {
    std::string key = rail_key(next, i);
    auto it = std::find_if(old.begin(), old.end(), [&](const Path& r) { return r.key == key; });
    if (it != old.end()) {
      paths_.push_back(std::move(*it));
      old.erase(it);
      paths_.back().health.set_settings(next.health);
      paths_.back().former = former_of(paths_.back().former);
    } else {
      Path r{PathHealth(next.health, now), key, true, {}, {}, false, {}};
      r.health.carrier(i < carrier.size() ? carrier[i] : true, now);
      (void)r.health.take_events();
      paths_.push_back(std::move(r));
    }
    Path& r = paths_.back();
    r.present = true;
    r.former.resize(C, 0);
    r.routed_around = i < route_around.size() && route_around[i];
  }
  cells_.reset();
  written_.assign(C, Shares{});
  written_health_.assign(C, Shares{});
  class_path_rate_.assign(C,
                          std::vector<RateEstimator>(P, RateEstimator(next.scheduler.ewma_weight)));
  rx_prev_.assign(C, std::vector<uint64_t>(P, 0));
  rx_rate_.assign(C, std::vector<double>(P, 0));
  move_seen_.assign(C, std::vector<std::optional<MoveSeen>>(P));
  rx_primed_ = false;
  policy_ = next;
}

void Controller::inherit(const std::vector<std::optional<RailRecord>>& records, Time now) {
  const size_t C = policy_.classes.size();
  for (size_t i = 0; i < paths_.size() && i < records.size(); ++i) {
    const auto& rec = records[i];
    if (!rec || rec->key != rail_key_hash(policy_, i)) continue;
    Path& r = paths_[i];
    for (size_t c = 0; c < C && c < rec->former.size(); ++c) r.former[c] = rec->former[c];
    bool failed = rec->state != RailState::Up && rec->state != RailState::Drained;
    bool none = std::none_of(r.former.begin(), r.former.end(), [](double f) { return f > 0; });
    if (failed && none)
      // a record without its classes' way back: their preferred rails
      for (size_t c = 0; c < C && c < sched_.classes.size(); ++c)
        r.former[c] = i < sched_.classes[c].shares.size()
                          ? sched_.classes[c].shares[i] / double(DP_SHARE_SCALE)
                          : 0;
    r.health.inherit(rec->state, rec->bfd_seen, now);
  }
}

std::vector<RailRecord> Controller::records() const {
  std::vector<RailRecord> out;
  for (size_t i = 0; i < paths_.size(); ++i) {
    const auto& h = paths_[i].health;
    out.push_back({rail_key_hash(policy_, i), h.state(), h.bfd_seen(), paths_[i].former});
  }
  return out;
}

std::vector<bool> Controller::routed_around_for(const Policy& next) const {
  std::vector<bool> out(next.paths.size(), false);
  for (size_t i = 0; i < next.paths.size(); ++i) {
    int was = policy_.path_index(next.paths[i].name);
    if (was >= 0 && static_cast<size_t>(was) < paths_.size())
      out[i] = paths_[static_cast<size_t>(was)].routed_around;
  }
  return out;
}

void Controller::carrier(size_t path, bool up, Time now) {
  if (path < paths_.size()) paths_[path].health.carrier(up, now);
}

void Controller::vanished(size_t path) {
  if (path < paths_.size()) paths_[path].present = false;
}

Plan Controller::tick(const TickInput& in) {
  for (auto& r : paths_) r.health.tick(in.now);
  for (size_t c = 0; c < class_path_rate_.size() && c < in.class_path_tx_bytes.size(); ++c)
    for (size_t p = 0; p < class_path_rate_[c].size() && p < in.class_path_tx_bytes[c].size(); ++p)
      class_path_rate_[c][p].update(in.class_path_tx_bytes[c][p], in.now);
  check_evidence(in);
  Plan plan;
  run_scheduler(in, plan);
  plan_cells(in, plan);
  Plan settled = settle(in.now);
  settled.events.insert(settled.events.begin(), plan.events.begin(), plan.events.end());
  // (the scheduler's decisions reach the plan through settle(); the cell
  // settings only through here: until 2026-12 they were dropped, and the
  // datapath never saw a cell)
  settled.cells = std::move(plan.cells);
  return settled;
}

Plan Controller::settle(Time now) {
  Plan plan;
  first_back(now);
  health_events(plan);
  effective(plan);
  routing(plan, now);
  return plan;
}

Plan::Cells plan_cells(const Policy& p, const std::vector<double>& other_bps) {
  Plan::Cells out;
  out.classes.assign(p.classes.size(), false);
  out.ns_per_kib.assign(p.paths.size(), 0);
  // (static mode never splits a class: nothing to place in cells or bursts)
  if (p.topology != Topology::Shared || !p.scheduler.adaptive ||
      (p.scheduler.flowcell == 0 && !p.scheduler.burst_placement))
    return out;
  out.bursts = p.scheduler.burst_placement;
  if (!out.bursts) {
    out.shift = static_cast<uint32_t>(std::countr_zero(p.scheduler.flowcell));
    out.any_order = p.scheduler.flowcell_any_order;
  }
  for (size_t c = 0; c < p.classes.size(); ++c)
    out.classes[c] = p.classes[c].kind == ClassKind::Elastic;
  for (size_t i = 0; i < p.paths.size(); ++i) {
    double cap = static_cast<double>(p.paths[i].capacity_bps);
    double other = i < other_bps.size() ? std::max(0.0, other_bps[i]) : 0;
    double left = std::max(cap - other, cap / 20);
    out.ns_per_kib[i] = static_cast<uint32_t>(std::min(8192e9 / left, 4e9));
  }
  return out;
}

// What each rail has left for cells: its capacity less what the classes not
// placed by cells (and unclassified traffic) send there, smoothed.
void Controller::plan_cells(const TickInput& in, Plan& plan) {
  const size_t P = policy_.paths.size();
  std::vector<double> other(P, 0);
  for (size_t i = 0; i < P && i < in.rails.size(); ++i) {
    double all = in.rails[i].utilisation * static_cast<double>(policy_.paths[i].capacity_bps);
    double cells = 0;
    for (size_t c = 0; c < policy_.classes.size() && c < class_path_rate_.size(); ++c) {
      const Shares& w = written_[c];
      bool split = !w.empty() &&
                   std::none_of(w.begin(), w.end(), [](uint16_t v) { return v >= DP_SHARE_SCALE; });
      if (policy_.classes[c].kind == ClassKind::Elastic && split)
        cells += class_path_rate_[c][i].rate() * 8;
    }
    other[i] = all - cells;
  }
  Plan::Cells next = dp::plan_cells(policy_, other);
  // a rail's drain time changes by the tick; a write is worth 5% of it
  bool same = cells_ && cells_->shift == next.shift && cells_->bursts == next.bursts &&
              cells_->classes == next.classes &&
              cells_->ns_per_kib.size() == next.ns_per_kib.size();
  for (size_t i = 0; same && i < next.ns_per_kib.size(); ++i) {
    double a = cells_->ns_per_kib[i], b = next.ns_per_kib[i];
    same = std::abs(a - b) <= 0.05 * std::max(a, b);
  }
  if (same) return;
  cells_ = next;
  plan.cells = std::move(next);
}

void Controller::run_scheduler(const TickInput& in, Plan& plan) {
  if (!policy_.scheduler.adaptive) return;  // static: the policy's rails, never moved
  SchedulerInput si;
  si.now = in.now;
  for (size_t i = 0; i < paths_.size() && i < in.rails.size(); ++i) {
    RailInput r;
    // a rail that is failed, held down, ramping or drained is not the
    // scheduler's to use: health gives it its traffic back (effective())
    r.healthy = paths_[i].present && paths_[i].health.weight() == 1;
    // on peaks of per-tick figures, or on the smoothed ones (peak_window 0)
    bool peaks = policy_.scheduler.peak_window.count() > 0;
    r.utilisation = peaks ? in.rails[i].tick_utilisation : in.rails[i].utilisation;
    r.rtt_us = in.rails[i].ls_rtt_p50_us;
    si.rails.push_back(r);
  }
  for (size_t c = 0; c < demand_.size(); ++c) {
    demand_[c].update(c < in.class_tx_bytes.size() ? in.class_tx_bytes[c] : 0, in.now);
    bool peaks = policy_.scheduler.peak_window.count() > 0;
    si.demand_bps.push_back((peaks ? demand_[c].last_rate() : demand_[c].rate()) * 8);
  }
  si.operator_pinned = op_pinned_;
  auto res = schedule(policy_, si, sched_);
  for (auto& e : res.events) {
    if (policy_.topology == Topology::Separate)
      e.reason += " (separate topology: new connections follow; established ones stay)";
    spdlog::info("scheduler: {} ({} -> {})", e.reason, format_shares(policy_, e.before),
                 format_shares(policy_, e.after));
    plan.events.push_back(e);
  }
  sched_ = res.state;  // written by effective(), through the rails' health
}

// When no rail carries traffic, the first rail back takes it at once: its
// hold-down and ramp protect traffic only where another rail carries it. The
// next rail back is held down and ramped as usual behind it.
void Controller::first_back(Time now) {
  for (const auto& r : paths_)
    if (r.present && r.health.weight() > 0) return;
  for (size_t i = 0; i < paths_.size(); ++i) {
    auto& h = paths_[i].health;
    if (!paths_[i].present || !h.alive()) continue;
    if (h.state() != RailState::Holddown && h.state() != RailState::Ramping) continue;
    h.promote("back while no other path carries traffic: carries at once (no hold-down)", now);
    return;
  }
}

void Controller::health_events(Plan& plan) {
  const size_t R = paths_.size(), C = policy_.classes.size();
  for (size_t i = 0; i < R; ++i) {
    for (auto& ev : paths_[i].health.take_events()) {
      const auto& name = policy_.paths[i].name;
      auto level = ev.to == RailState::Down ? spdlog::level::warn : spdlog::level::info;
      spdlog::log(level, "path {}: {} -> {}: {}", name, to_string(ev.from), to_string(ev.to),
                  ev.reason);
      bool was_carrying = ev.from == RailState::Up || ev.from == RailState::Suspect;
      bool now_zero =
          ev.to == RailState::Down || ev.to == RailState::Holddown || ev.to == RailState::Drained;
      auto& former = paths_[i].former;
      // (a suspicion that goes to the ramp keeps the shares it had: the ramp
      // brings them back)
      if (was_carrying && (now_zero || ev.to == RailState::Ramping))
        for (size_t c = 0; c < C && c < sched_.classes.size(); ++c)
          former[c] = i < sched_.classes[c].shares.size()
                          ? sched_.classes[c].shares[i] / double(DP_SHARE_SCALE)
                          : 0;
      if (ev.from == RailState::Ramping && ev.to == RailState::Up) {
        // failback complete: the scheduler takes over from the former shares
        for (size_t c = 0; c < C && c < sched_.classes.size(); ++c) {
          auto& sh = sched_.classes[c].shares;
          if (former[c] > 0 && i < sh.size()) sh = restore_share(sh, i, former[c]);
        }
      }
      if (policy_.topology == Topology::Separate) {
        // (a rail inherited as failed: the daemon before may have been
        // killed before it ended the connections stuck there)
        if ((was_carrying || ev.inherited) &&
            (ev.to == RailState::Down || ev.to == RailState::Holddown))
          plan.resets.push_back({i, false});
        else if (ev.from == RailState::Up && ev.to == RailState::Suspect)
          // the classes that leave a suspect rail (suspect_moves) cannot take
          // their established connections with them
          plan.resets.push_back({i, !policy_.health.suspect_moves_elastic, true});
      }
      auto settle = ev.t + std::chrono::duration_cast<SchedClock::duration>(
                               policy_.health.interval * policy_.health.multiplier);
      if (was_carrying && now_zero)
        for (size_t j = 0; j < R; ++j)
          if (j != i) paths_[j].settle_until = std::max(paths_[j].settle_until, settle);
      // A rail back from a failure: connections that backed off while it was
      // out retransmit onto it in its first moments, and one more RTO among
      // them is the outage's echo, not a new failure (after both rails were
      // down: 1 RTO, 1 of 9 segments retransmitted, nothing acknowledged in
      // 50 ms made the rail suspect again). Its own evidence waits as long as
      // BFD takes to tell, as a rail's that took over a failed one does.
      if ((ev.from == RailState::Down || ev.from == RailState::Holddown) &&
          (ev.to == RailState::Ramping || ev.to == RailState::Up))
        paths_[i].settle_until = std::max(paths_[i].settle_until, settle);
      SchedulerEvent e;
      e.t = ev.t;
      e.path = name;
      e.kind = "health";
      e.reason =
          fmt::format("{} {} -> {}: {}", name, to_string(ev.from), to_string(ev.to), ev.reason);
      plan.events.push_back(std::move(e));
    }
  }
}

// A pin by the policy or by dpctl class set is DP_DECISION_F_PINNED; the
// latter is also kOperatorPinned, which a reload and a restart read back.
uint32_t Controller::flags(size_t klass) const {
  uint32_t f = policy_.classes[klass].pinned ? DP_DECISION_F_PINNED : 0;
  if (klass < op_pinned_.size() && op_pinned_[klass]) f |= DP_DECISION_F_PINNED | kOperatorPinned;
  return f;
}

// The scheduler's shares, reshaped by health: what the decision map must
// hold; only what differs from what it holds is written.
void Controller::effective(Plan& plan) const {
  const size_t R = policy_.paths.size(), C = policy_.classes.size();
  if (paths_.size() != R || sched_.classes.size() != C) return;
  std::vector<HealthView> views(R);
  for (size_t r = 0; r < R; ++r) {
    const auto& h = paths_[r].health;
    bool gone = !paths_[r].present;
    views[r] = {gone ? 0 : h.weight(), h.latency_ok(), h.alive() && !gone,
                static_cast<double>(policy_.paths[r].capacity_bps), h.carrier_up() && !gone};
  }
  for (size_t c = 0; c < C; ++c) {
    std::vector<double> former(R);
    for (size_t r = 0; r < R; ++r) former[r] = paths_[r].former[c];
    // "latency_sensitive" here means "leaves a suspect rail"
    auto healthy = apply_health(sched_.classes[c].shares, former, views,
                                policy_.classes[c].kind == ClassKind::LatencySensitive ||
                                    policy_.health.suspect_moves_elastic);
    if (!healthy) continue;
    Shares eff = policy_.topology == Topology::Separate ? by_bytes(c, *healthy) : *healthy;
    if (eff == written_[c] && *healthy == written_health_[c]) continue;
    DecisionWrite w{c, eff, flags(c), *healthy, std::nullopt};
    if (!written_[c].empty() && *healthy != written_health_[c] &&
        *healthy != sched_.classes[c].shares) {
      SchedulerEvent e;
      e.t = SchedClock::now();
      e.klass = policy_.classes[c].name;
      e.before = written_health_[c].empty() ? written_[c] : written_health_[c];
      e.after = *healthy;
      e.kind = "health";
      e.reason = fmt::format("{}: {} -> {} by path health", e.klass,
                             format_shares(policy_, e.before), format_shares(policy_, e.after));
      w.event = std::move(e);
    }
    plan.writes.push_back(std::move(w));
  }
}

// Routing goes around every rail without a weight, while some rail has one.
void Controller::routing(Plan& plan, Time now) {
  const size_t R = paths_.size();
  std::vector<bool> failed(R, false);
  bool any_up = false;
  for (size_t i = 0; i < R; ++i) {
    failed[i] = paths_[i].health.weight() == 0;
    any_up = any_up || !failed[i];
  }
  bool any_alive =
      std::any_of(paths_.begin(), paths_.end(), [](auto& r) { return r.health.alive(); });
  bool carrier_differs = std::any_of(paths_.begin(), paths_.end(), [&](auto& r) {
    return r.health.carrier_up() != paths_.front().health.carrier_up();
  });
  if (!any_up && (any_alive || carrier_differs)) {
    // no rail has a weight but some forward (a hold-down with no
    // alternative), or have their carrier back before BFD (apply_health)
    for (size_t i = 0; i < R; ++i)
      failed[i] = any_alive ? !paths_[i].health.alive() : !paths_[i].health.carrier_up();
    any_up = true;
  }
  if (!any_up) {
    if (!all_down_) {
      spdlog::critical(
          "every path of node {} is down: keeping the last decisions and routing until one "
          "returns",
          policy_.node);
      SchedulerEvent e;
      e.t = now;
      e.kind = "health";
      e.reason = "every path is down: the last decisions and routing stay";
      plan.events.push_back(std::move(e));
    }
    all_down_ = true;
    return;
  }
  all_down_ = false;
  std::vector<bool> routed(R);
  for (size_t i = 0; i < R; ++i) routed[i] = paths_[i].routed_around;
  if (failed != routed) plan.route_around = failed;
}

DecisionWrite Controller::place(size_t klass, size_t path, bool operator_pin) const {
  Shares whole = all_on(policy_.paths.size(), path);
  return {klass, whole, operator_pin ? DP_DECISION_F_PINNED | kOperatorPinned : 0u, whole,
          std::nullopt};
}

void Controller::placed(size_t klass, size_t path, bool operator_pin) {
  if (klass < sched_.classes.size())
    sched_.classes[klass].shares = all_on(policy_.paths.size(), path);
  if (klass < op_pinned_.size()) op_pinned_[klass] = operator_pin;
  if (klass < written_.size()) written_[klass] = sched_.classes[klass].shares;
  if (klass < written_health_.size()) written_health_[klass] = sched_.classes[klass].shares;
}

void Controller::unpinned(size_t klass) {
  if (klass < op_pinned_.size()) op_pinned_[klass] = false;
}

Result<void> Controller::drain(size_t path, bool on, Time now) {
  if (path >= paths_.size()) return DP_ERROR("no path {}", path);
  if (on) {
    size_t carrying = 0;
    for (size_t r = 0; r < paths_.size(); ++r)
      carrying += r != path && paths_[r].health.weight() > 0;
    if (!carrying)
      return DP_ERROR("{} is the only path carrying traffic; draining it would leave none",
                      policy_.paths[path].name);
  }
  paths_[path].health.drain(on, now);
  return {};
}

void Controller::written(const DecisionWrite& w) {
  if (w.klass < written_.size()) written_[w.klass] = w.shares;
  if (w.klass < written_health_.size())
    written_health_[w.klass] = w.health_shares.empty() ? w.shares : w.health_shares;
}

// The separate topology places new connections, and a connection's bytes
// stay where it was placed: new connections lean toward the rails that got
// less than their share of the class's recent bytes (by count, connections
// would only follow the shares on average). Only rails with a share get any;
// a class sending little (under 1 MB/s), or whose bytes already match its
// shares within 2%, keeps its shares.
Shares Controller::by_bytes(size_t klass, const Shares& shares) const {
  constexpr double kMinRate = 1e6;  // bytes/s
  const auto& rates = class_path_rate_.at(klass);
  double total = 0;
  for (const auto& r : rates) total += r.rate();
  if (total < kMinRate || rates.size() != shares.size()) return shares;
  std::vector<double> want(shares.size());
  double sum = 0;
  for (size_t p = 0; p < shares.size(); ++p) {
    double target = shares[p] / double(DP_SHARE_SCALE);
    double got = rates[p].rate() / total;
    want[p] = target > 0 ? std::clamp(2 * target - got, 0.0, 1.0) : 0.0;
    sum += want[p];
  }
  if (sum <= 0) return shares;
  Shares out(shares.size(), 0);
  int left = DP_SHARE_SCALE, last = -1;
  for (size_t p = 0; p < shares.size(); ++p) {
    out[p] = static_cast<uint16_t>(std::lround(want[p] / sum * DP_SHARE_SCALE));
    left -= out[p];
    if (out[p]) last = static_cast<int>(p);
  }
  if (last >= 0)
    out[static_cast<size_t>(last)] = static_cast<uint16_t>(out[static_cast<size_t>(last)] + left);
  // within 2% of what is written: not worth a write
  const Shares& now = written_.at(klass);
  if (now.size() == out.size()) {
    bool close = true;
    for (size_t p = 0; p < out.size(); ++p)
      close = close && (out[p] == 0) == (now[p] == 0) && std::abs(int(out[p]) - int(now[p])) <= 200;
    if (close) return now;
  }
  return out;
}

void Controller::routed(const std::vector<bool>& around) {
  for (size_t i = 0; i < paths_.size() && i < around.size(); ++i)
    paths_[i].routed_around = around[i];
}

// PathMonitor that carry traffic: those with a weight, or, when none has one, those
// that forward at all (a hold-down with no alternative; apply_health).
size_t Controller::paths_carrying() const {
  size_t weighted = 0, alive = 0;
  for (const auto& r : paths_) {
    weighted += r.present && r.health.weight() > 0;
    alive += r.present && r.health.alive();
  }
  return weighted ? weighted : alive;
}

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/health.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "dualpath/abi.h"
#include "dualpath/core/units.h"

namespace dp {

const char* to_string(RailState s) {
  switch (s) {
    case RailState::Up:
      return "up";
    case RailState::Suspect:
      return "suspect";
    case RailState::Down:
      return "down";
    case RailState::Holddown:
      return "holddown";
    case RailState::Ramping:
      return "ramping";
    case RailState::Drained:
      return "drained";
  }
  return "?";
}

PathHealth::PathHealth(const HealthSettings& s, Time now) : s_(s), since_(now), step_since_(now) {
  if (s_.ramp.empty()) s_.ramp = {100};
}

void PathHealth::set_settings(const HealthSettings& s) {
  s_ = s;
  if (s_.ramp.empty()) s_.ramp = {100};
  step_ = std::min(step_, static_cast<int>(s_.ramp.size()) - 1);
}

double PathHealth::weight() const {
  switch (state_) {
    case RailState::Up:
    case RailState::Suspect:
      return 1;
    case RailState::Ramping:
      // below 1 even at the 100% step: the rail is the scheduler's again
      // only once it is Up (failback complete)
      return std::clamp(s_.ramp[static_cast<size_t>(step_)] / 100.0, 0.0, 0.999);
    default:
      return 0;
  }
}

void PathHealth::go(RailState to, std::string reason, Time now) {
  if (to == state_ && reason == reason_) return;
  if (to == RailState::Down || (to == RailState::Holddown && state_ != RailState::Down))
    ++failures_;
  events_.push_back({now, state_, to, reason});
  unconfirmed_ramp_ = false;
  state_ = to;
  reason_ = std::move(reason);
  since_ = now;
  if (to != RailState::Suspect) suspect_until_.reset();
  if (to == RailState::Ramping) {
    step_ = 0;
    step_since_ = now;
  }
}

// Carrier or BFD changed: fail at once, or start the way back.
void PathHealth::evaluate(Time now, const std::string& why) {
  if (!link_ok()) {
    if (state_ != RailState::Down)
      go(RailState::Down, why, now);
    else if (carrier_)  // still down, no longer for the carrier: say what holds it
      reason_ = fmt::format("{}; down until its BFD session is up", why);
    return;
  }
  if (state_ == RailState::Down) {
    if (drained_)
      go(RailState::Drained, "back (" + why + ") but drained by the operator", now);
    else
      go(RailState::Holddown,
         fmt::format("back ({}): hold-down {} before traffic returns", why,
                     format_duration(s_.holddown)),
         now);
  }
}

void PathHealth::carrier(bool up, Time now) {
  if (up == carrier_) return;
  carrier_ = up;
  evaluate(now, up ? "carrier up" : "carrier lost");
}

void PathHealth::bfd(bfd::State s, bfd::Diag diag, bool peer_admin_down, Time now) {
  bool failed = bfd_failed_;
  std::string why;
  if (s == bfd::State::Up) {
    bfd_up_once_ = true;
    bfd_seen_ = true;
    failed = false;
    why = "BFD up";
    if (await_bfd_) {
      // the positive evidence a failed rail waited for: the usual way back
      await_bfd_ = false;
      bfd_failed_ = false;
      evaluate(now, why);
      return;
    }
    // the ramp stood in for the BFD session that was missing when the
    // suspicion expired; a session now up clears it, as it would have then
    if (unconfirmed_ramp_ && state_ == RailState::Ramping && !bfd_failed_) {
      go(RailState::Up, "BFD up: the unconfirmed suspicion is cleared", now);
      return;
    }
  } else if (peer_admin_down || s == bfd::State::AdminDown) {
    failed = false;  // RFC 5882 3.2: not a forwarding failure
    bfd_up_once_ = false;
    bfd_seen_ = false;  // the peer runs no session for now: nothing to wait for
    why = "BFD peer administratively down";
  } else if (bfd_up_once_ && s == bfd::State::Down) {
    failed = true;
    why = fmt::format("BFD down: {}", bfd::to_string(diag));
  }
  if (failed == bfd_failed_) return;
  bfd_failed_ = failed;
  evaluate(now, why);
}

void PathHealth::evidence(const std::string& why, std::chrono::nanoseconds confirm_within,
                          Time now) {
  while (!suspicions_.empty() && now - suspicions_.front() > kSuspicionWindow)
    suspicions_.pop_front();
  if (state_ == RailState::Ramping) {
    go(RailState::Holddown, "ramp aborted: " + why, now);
    return;
  }
  if (state_ != RailState::Up) return;
  suspicions_.push_back(now);
  if (static_cast<int>(suspicions_.size()) >= kSuspicionsToFail) {
    suspicions_.clear();
    go(RailState::Holddown,
       fmt::format("{} ({} suspicions in {}s): hold-down {}", why, kSuspicionsToFail,
                   kSuspicionWindow.count(), format_duration(s_.holddown)),
       now);
    return;
  }
  go(RailState::Suspect, why, now);
  suspect_until_ = now + confirm_within;
}

void PathHealth::bfd_speaker_gone(const std::string& why, Time now) {
  bfd_up_once_ = false;
  events_.push_back({now, state_, state_, why});
}

void PathHealth::inherit(RailState was, bool bfd_seen, Time now) {
  bfd_seen_ = bfd_seen && s_.bfd;
  if (was == RailState::Up) return;
  if (was == RailState::Drained) {
    drained_ = true;
    state_ = RailState::Drained;
    reason_ = "drained by the operator (before the restart)";
  } else if (bfd_seen_) {
    await_bfd_ = true;
    state_ = RailState::Down;
    reason_ = fmt::format(
        "{} before the restart: down until its BFD session, up before, says it forwards",
        to_string(was));
  } else {
    // no session that could say it forwards: the hold-down, then the ramp,
    // where new evidence fails it again
    state_ = RailState::Holddown;
    reason_ = fmt::format("{} before the restart, and no BFD session to tell: hold-down {}",
                          to_string(was), format_duration(s_.holddown));
  }
  since_ = now;
  HealthEvent e{now, state_, state_, reason_};
  e.inherited = true;
  events_.push_back(std::move(e));
}

void PathHealth::promote(const std::string& why, Time now) {
  if (state_ != RailState::Holddown && state_ != RailState::Ramping) return;
  go(RailState::Up, why, now);
}

void PathHealth::drain(bool on, Time now) {
  if (on == drained_) return;
  drained_ = on;
  if (on) {
    if (state_ != RailState::Down) go(RailState::Drained, "drained by the operator", now);
  } else if (state_ == RailState::Drained) {
    go(RailState::Ramping, "undrained by the operator", now);
  }
}

void PathHealth::tick(Time now) {
  if (state_ == RailState::Suspect && suspect_until_ && now >= *suspect_until_) {
    // BFD ran and did not confirm: the rail forwards. Without a session (BFD
    // off, or never up) nothing has said so: the traffic returns through
    // the ramp, where new evidence sends the rail to hold-down instead of
    // letting every class back onto a rail that may still drop everything.
    if (bfd_up_once_) {
      go(RailState::Up, "suspicion not confirmed by BFD: restored", now);
    } else if (bfd_seen_) {
      // the session was up before (the last run's) and is not up now: no
      // session yet is no confirmation that the rail forwards
      await_bfd_ = true;
      go(RailState::Down, "suspicion not cleared: no BFD session yet; down until it comes up", now);
    } else {
      go(RailState::Ramping, "suspicion not confirmed, and no BFD session to clear it: ramping",
         now);
      unconfirmed_ramp_ = true;
    }
  } else if (state_ == RailState::Holddown && now - since_ >= s_.holddown) {
    go(RailState::Ramping,
       fmt::format("up and clean for the hold-down {}: ramping", format_duration(s_.holddown)),
       now);
  } else if (state_ == RailState::Ramping && now - step_since_ >= s_.ramp_interval) {
    if (static_cast<size_t>(step_ + 1) >= s_.ramp.size()) {
      go(RailState::Up, "failback complete", now);
    } else {
      ++step_;
      step_since_ = now;
      events_.push_back(
          {now, state_, state_, fmt::format("ramp step {}%", s_.ramp[static_cast<size_t>(step_)])});
    }
  }
}

std::vector<HealthEvent> PathHealth::take_events() {
  std::vector<HealthEvent> out;
  out.swap(events_);
  return out;
}

namespace {

// Fractions (summing to 1) to integer shares summing to the scale exactly.
Shares to_shares(const std::vector<double>& w) {
  Shares out(w.size(), 0);
  int total = 0;
  size_t biggest = 0;
  for (size_t r = 0; r < w.size(); ++r) {
    out[r] = static_cast<uint16_t>(std::lround(w[r] * DP_SHARE_SCALE));
    total += out[r];
    if (w[r] > w[biggest]) biggest = r;
  }
  if (!out.empty()) out[biggest] = static_cast<uint16_t>(out[biggest] + (DP_SHARE_SCALE - total));
  return out;
}

}  // namespace

std::optional<Shares> apply_health(const Shares& sched, const std::vector<double>& former,
                                   const std::vector<HealthView>& rails, bool latency_sensitive) {
  const size_t R = rails.size();
  auto usable = [&](size_t r) {
    return rails[r].weight > 0 && (rails[r].latency_ok || !latency_sensitive);
  };
  bool any = false;
  for (size_t r = 0; r < R; ++r) any = any || usable(r);
  std::vector<double> w(R, 0);
  if (!any) {
    // No rail may carry traffic by the rules: what forwards at all carries it
    // as if it were up (a rail in hold-down with no alternative).
    // With none alive, a rail whose carrier is back while another's is not
    // (its BFD session comes up a second later) is tried: nothing else
    // carries, and the carrier at least tells the rails apart.
    bool any_alive = false, carrier_differs = false;
    for (auto& v : rails) {
      any_alive = any_alive || v.alive;
      carrier_differs = carrier_differs || v.carrier != rails.front().carrier;
    }
    if (!any_alive && !carrier_differs) return std::nullopt;
    std::vector<HealthView> last = rails;
    for (auto& v : last) {
      v.weight = (any_alive ? v.alive : v.carrier) ? 1 : 0;
      v.latency_ok = true;
      v.alive = v.carrier = true;  // (the recursion stops at the first rule)
    }
    return apply_health(sched, former, last, latency_sensitive);
  } else {
    double ramped = 0;
    std::vector<double> base(R, 0);
    double base_sum = 0, full_cap = 0;
    for (size_t r = 0; r < R; ++r) {
      if (!usable(r)) continue;
      if (rails[r].weight < 1) {
        w[r] = (r < former.size() ? former[r] : 0) * rails[r].weight;
        ramped += w[r];
      } else {
        base[r] = r < sched.size() ? sched[r] : 0;
        base_sum += base[r];
        full_cap += std::max(rails[r].capacity_bps, 1.0);
      }
    }
    if (full_cap == 0) {
      // only ramping rails: they carry everything, in proportion
      double sum = 0;
      for (size_t r = 0; r < R; ++r) sum += usable(r) ? std::max(w[r], 1e-6) : 0;
      for (size_t r = 0; r < R; ++r) w[r] = usable(r) ? std::max(w[r], 1e-6) / sum : 0;
    } else {
      ramped = std::min(ramped, 1.0);
      for (size_t r = 0; r < R; ++r) {
        if (!usable(r) || rails[r].weight < 1) continue;
        double f =
            base_sum > 0 ? base[r] / base_sum : std::max(rails[r].capacity_bps, 1.0) / full_cap;
        w[r] = (1 - ramped) * f;
      }
    }
  }
  return to_shares(w);
}

Shares restore_share(const Shares& s, size_t rail, double former) {
  double rest = 0;
  for (size_t r = 0; r < s.size(); ++r) rest += r == rail ? 0 : s[r];
  std::vector<double> w(s.size(), 0);
  for (size_t r = 0; r < s.size(); ++r)
    w[r] = r == rail ? (rest > 0 ? former : 1) : rest > 0 ? (1 - former) * s[r] / rest : 0;
  return to_shares(w);
}

}  // namespace dp

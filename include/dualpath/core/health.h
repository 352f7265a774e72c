// SPDX-License-Identifier: Apache-2.0
// Path health: one rail's state from its carrier, its BFD session, data-path
// evidence and the operator (drain), with hold-down and a gradual failback;
// and how the rails' health turns the scheduler's shares into the shares the
// datapath gets. Pure: time is passed in.
//
//        carrier/BFD fail            back (carrier and BFD)       hold-down over
//   Up ------------------> Down ----------------------> Holddown -------------> Ramping
//    ^ \ evidence                                          ^  any failure          | last
//    |  `-> Suspect --BFD confirms--> Down                 `-----------------------| step
//    |        |--not confirmed in the detection time--> Up                         v
//    |        `--no BFD session, detection time over---------------------> Ramping
//    `------------------------------------------------------------------------- Up
//   drain: any state -> Drained (weight 0); undrain -> Ramping (no hold-down).
//
// Evidence, not its absence: a suspicion that expires with no BFD session up
// on a rail whose session was up before (in this run or the last) is not
// "not confirmed": the rail goes Down until the session says it forwards.
// A restarted daemon inherits each rail's state (inherit()): a rail that was
// failed stays Down until BFD comes up (or, without BFD, serves a hold-down
// and ramps). The first rail back while no other carries traffic is promoted
// to Up at once by the controller (promote()): a hold-down protects traffic
// only where another rail carries it.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/bfd.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/scheduler.h"

namespace dp {

enum class RailState { Up, Suspect, Down, Holddown, Ramping, Drained };
const char* to_string(RailState s);

struct HealthEvent {
  SchedClock::time_point t;
  RailState from, to;
  std::string reason;
  bool inherited = false;  // the state a restarted daemon took over
};

class PathHealth {
 public:
  using Time = SchedClock::time_point;
  PathHealth(const HealthSettings& s, Time now);

  // Inputs. Each may change the state at once.
  void carrier(bool up, Time now);
  // The BFD session's state. A session that was never Up, or that the peer
  // took administratively down (RFC 5882 3.2), is no evidence of failure.
  void bfd(bfd::State s, bfd::Diag diag, bool peer_admin_down, Time now);
  // The session went down for a reason that is not the rail's (the peer's
  // BFD speaker stopped while its traffic still arrives): no failure; the
  // session counts again once it is up.
  void bfd_speaker_gone(const std::string& why, Time now);
  // A burst of retransmits or RTOs on this rail only. `confirm_within` is how
  // long BFD has to confirm before the rail is restored.
  void evidence(const std::string& why, std::chrono::nanoseconds confirm_within, Time now);
  void drain(bool on, Time now);
  // What the daemon before this one knew of the rail (its last settled state
  // and whether its BFD session was ever up), on a restart: a rail that was
  // failed stays Down until positive evidence. Before any other input.
  void inherit(RailState was, bool bfd_seen, Time now);
  // The first rail back while no other carries traffic: Up at once, from a
  // hold-down or a ramp.
  void promote(const std::string& why, Time now);
  // Timers: suspicion expiry, hold-down, ramp steps.
  void tick(Time now);
  // A reloaded policy's timers; the state and its history stay.
  void set_settings(const HealthSettings& s);

  RailState state() const { return state_; }
  Time since() const { return since_; }
  const std::string& reason() const { return reason_; }
  // Fraction of its former traffic the rail may carry: 0, a ramp step, or 1.
  double weight() const;
  // Latency-sensitive classes may stay (false while Suspect).
  bool latency_ok() const { return state_ != RailState::Suspect; }
  // Carrier and BFD say it forwards, whatever the hold-down says: used when
  // no rail has a weight, so that a returning rail is used at once.
  bool alive() const { return link_ok(); }
  bool carrier_up() const { return carrier_; }
  bool bfd_in_use() const { return bfd_up_once_; }
  // The rail's BFD session was up in this run or, as inherited, the last one.
  bool bfd_seen() const { return bfd_seen_; }
  // Down until its BFD session comes up (a failure with no other evidence
  // that could end it).
  bool awaiting_bfd() const { return await_bfd_; }
  uint64_t failures() const { return failures_; }
  std::vector<HealthEvent> take_events();

 private:
  bool link_ok() const { return carrier_ && !bfd_failed_ && !await_bfd_; }
  void go(RailState to, std::string reason, Time now);
  void evaluate(Time now, const std::string& why);

  HealthSettings s_;
  RailState state_ = RailState::Up;
  Time since_;
  std::string reason_ = "started";
  bool carrier_ = true;
  bool bfd_up_once_ = false;
  bool bfd_seen_ = false;
  bool await_bfd_ = false;
  bool bfd_failed_ = false;
  bool drained_ = false;
  bool unconfirmed_ramp_ = false;  // ramping from a suspicion no BFD session could clear
  std::optional<Time> suspect_until_;
  std::deque<Time> suspicions_;  // recent, for escalation
  int step_ = 0;
  Time step_since_;
  uint64_t failures_ = 0;
  std::vector<HealthEvent> events_;
};

// Suspicions within this window that make a rail fail (Holddown) rather than
// be restored again: persistent loss that BFD does not see (30% loss).
constexpr int kSuspicionsToFail = 3;
constexpr std::chrono::seconds kSuspicionWindow{60};

struct HealthView {
  double weight = 1;        // PathHealth::weight()
  bool latency_ok = true;   // PathHealth::latency_ok()
  bool alive = true;        // PathHealth::alive()
  double capacity_bps = 0;  // to split a class that has nowhere else to go
  bool carrier = true;      // PathHealth::carrier_up()
};

// The shares to write for one class: the scheduler's `sched` shares with no
// share on a rail of weight 0 (or Suspect, for a latency-sensitive class), a
// ramping rail given `former` x its weight, the rest in proportion to the
// scheduler's shares. When no rail has a weight, alive rails are used; when
// none is alive, the rails with carrier while another has none (a rail whose
// carrier came back before its BFD session: nothing else carries); else
// nullopt: keep the last decisions.
std::optional<Shares> apply_health(const Shares& sched, const std::vector<double>& former,
                                   const std::vector<HealthView>& rails, bool latency_sensitive);

// A class's shares with `rail` given back its former fraction, the other
// rails scaled to the rest in their proportions (failback complete).
Shares restore_share(const Shares& s, size_t rail, double former);

}  // namespace dp

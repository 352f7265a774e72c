// SPDX-License-Identifier: Apache-2.0
// Rail health: failure, hold-down, ramp, suspicion, drain; and how health
// reshapes a class's shares.
#include <gtest/gtest.h>

#include "dualpath/abi.h"
#include "dualpath/core/health.h"

namespace dp {
namespace {

using namespace std::chrono_literals;
using T = SchedClock::time_point;

HealthSettings fast() {
  HealthSettings s;
  s.holddown = 10s;
  s.ramp = {10, 25, 50, 100};
  s.ramp_interval = 2s;
  return s;
}

TEST(PathHealth, CarrierLossFailsAtOnceAndFailbackWaitsForTheHolddownThenRamps) {
  T t{};
  PathHealth h(fast(), t);
  EXPECT_EQ(h.weight(), 1);
  h.carrier(false, t + 1s);
  EXPECT_EQ(h.state(), RailState::Down);
  EXPECT_EQ(h.reason(), "carrier lost");
  EXPECT_EQ(h.weight(), 0);
  h.carrier(true, t + 2s);
  EXPECT_EQ(h.state(), RailState::Holddown);
  h.tick(t + 11s);
  EXPECT_EQ(h.state(), RailState::Holddown) << "9 s of a 10 s hold-down";
  h.tick(t + 12s);
  EXPECT_EQ(h.state(), RailState::Ramping);
  std::vector<double> weights{h.weight()};
  for (int s = 13; s <= 22; ++s) {
    h.tick(t + std::chrono::seconds(s));
    if (h.weight() != weights.back()) weights.push_back(h.weight());
  }
  EXPECT_EQ(weights, (std::vector<double>{0.10, 0.25, 0.50, 0.999, 1.0}))
      << "each step for one interval; Up (1) only when the ramp is complete";
  EXPECT_EQ(h.state(), RailState::Up);
  EXPECT_EQ(h.failures(), 1u);
}

TEST(PathHealth, AFlappingRailNeverGetsTrafficInsideItsHolddown) {
  T t{};
  PathHealth h(fast(), t);
  for (int s = 1; s < 60; ++s) {  // down/up every second for a minute
    h.carrier(s % 2 == 0, t + std::chrono::seconds(s));
    h.tick(t + std::chrono::seconds(s));
    EXPECT_EQ(h.weight(), 0) << "at " << s << " s";
  }
  h.carrier(true, t + 60s);
  h.tick(t + 69s);
  EXPECT_EQ(h.weight(), 0);
  h.tick(t + 70s);
  EXPECT_GT(h.weight(), 0);
}

TEST(PathHealth, AFailureDuringTheRampAbortsIt) {
  T t{};
  PathHealth h(fast(), t);
  h.carrier(false, t);
  h.carrier(true, t);
  h.tick(t + 10s);
  ASSERT_EQ(h.state(), RailState::Ramping);
  h.evidence("retransmit burst", 1500ms, t + 11s);
  EXPECT_EQ(h.state(), RailState::Holddown);
  EXPECT_EQ(h.weight(), 0);
  h.tick(t + 20s);
  EXPECT_EQ(h.state(), RailState::Holddown) << "the hold-down restarted";
}

TEST(PathHealth, BfdDownCountsOnlyAfterTheSessionWasUp) {
  T t{};
  PathHealth h(fast(), t);
  h.bfd(bfd::State::Down, bfd::Diag::None, false, t);
  EXPECT_EQ(h.state(), RailState::Up) << "a session that never came up is no evidence";
  h.bfd(bfd::State::Up, bfd::Diag::None, false, t + 1s);
  h.bfd(bfd::State::Down, bfd::Diag::TimeExpired, false, t + 2s);
  EXPECT_EQ(h.state(), RailState::Down);
  EXPECT_EQ(h.reason(), "BFD down: control detection time expired");
  h.bfd(bfd::State::Up, bfd::Diag::None, false, t + 3s);
  EXPECT_EQ(h.state(), RailState::Holddown);
}

// A rail down for its carrier and its BFD session: once the carrier is back
// its reason says what still holds it, not "carrier lost".
TEST(PathHealth, ADownRailsReasonFollowsWhatStillHoldsIt) {
  T t{};
  PathHealth h(fast(), t);
  h.bfd(bfd::State::Up, bfd::Diag::None, false, t);
  h.carrier(false, t + 1s);
  h.bfd(bfd::State::Down, bfd::Diag::TimeExpired, false, t + 2s);
  EXPECT_EQ(h.reason(), "carrier lost");
  h.carrier(true, t + 3s);
  EXPECT_EQ(h.state(), RailState::Down);
  EXPECT_EQ(h.reason(), "carrier up; down until its BFD session is up");
}

TEST(PathHealth, PeerAdminDownIsNotAFailure) {
  T t{};
  PathHealth h(fast(), t);
  h.bfd(bfd::State::Up, bfd::Diag::None, false, t);
  h.bfd(bfd::State::Down, bfd::Diag::NeighborDown, true, t + 1s);
  EXPECT_EQ(h.state(), RailState::Up);
  EXPECT_FALSE(h.bfd_in_use());
}

TEST(PathHealth, SuspicionIsConfirmedByBfdOrRestoredAndRepeatedSuspicionFails) {
  T t{};
  PathHealth h(fast(), t);
  h.bfd(bfd::State::Up, bfd::Diag::None, false, t);
  h.evidence("12 RTOs on rail0", 1500ms, t + 1s);
  EXPECT_EQ(h.state(), RailState::Suspect);
  EXPECT_EQ(h.weight(), 1) << "elastic classes stay";
  EXPECT_FALSE(h.latency_ok()) << "latency-sensitive classes leave at once";
  h.tick(t + 2400ms);
  EXPECT_EQ(h.state(), RailState::Suspect);
  h.tick(t + 2600ms);
  EXPECT_EQ(h.state(), RailState::Up) << "not confirmed within the detection time";

  h.evidence("again", 1500ms, t + 3s);
  h.bfd(bfd::State::Down, bfd::Diag::TimeExpired, false, t + 4s);
  EXPECT_EQ(h.state(), RailState::Down) << "confirmed";

  PathHealth g(fast(), t);
  g.bfd(bfd::State::Up, bfd::Diag::None, false, t);  // up: loss that BFD does not see
  g.evidence("loss", 1500ms, t + 1s);
  g.tick(t + 3s);
  g.evidence("loss", 1500ms, t + 4s);
  g.tick(t + 6s);
  g.evidence("loss", 1500ms, t + 7s);
  EXPECT_EQ(g.state(), RailState::Holddown) << kSuspicionsToFail << " suspicions in a minute";
}

// A rail without a BFD session (bfd = false, as on routed rails whose
// routers run none): nothing can clear a suspicion, so the traffic comes
// back through the ramp, and evidence during it fails the rail.
TEST(PathHealth, WithoutBfdAnUnconfirmedSuspicionRampsBackAndEvidenceOnTheRampFailsIt) {
  T t{};
  PathHealth h(fast(), t);
  h.evidence("12 RTOs on rail0", 1500ms, t + 1s);
  EXPECT_EQ(h.state(), RailState::Suspect);
  h.tick(t + 2600ms);
  EXPECT_EQ(h.state(), RailState::Ramping) << h.reason();
  EXPECT_NEAR(h.weight(), 0.10, 1e-9) << "the ramp's first step, not all of it";
  h.evidence("still dropping", 1500ms, t + 3s);
  EXPECT_EQ(h.state(), RailState::Holddown) << h.reason();

  PathHealth g(fast(), t);  // a clean ramp ends up
  g.evidence("a burst of RTOs", 1500ms, t + 1s);
  for (int ms = 1100; ms <= 12000; ms += 100) g.tick(t + std::chrono::milliseconds(ms));
  EXPECT_EQ(g.state(), RailState::Up) << g.reason();
}

TEST(PathHealth, ABfdSessionThatComesUpEndsTheRampOfAnUnconfirmedSuspicion) {
  T t{};
  PathHealth h(fast(), t);  // no BFD session yet (the peer's daemon restarting)
  h.evidence("a burst of RTOs", 1500ms, t + 1s);
  h.tick(t + 2600ms);
  ASSERT_EQ(h.state(), RailState::Ramping) << h.reason();
  h.bfd(bfd::State::Up, bfd::Diag::None, false, t + 3s);
  EXPECT_EQ(h.state(), RailState::Up) << "BFD clears the suspicion, as it would have at expiry";

  PathHealth g(fast(), t);  // a ramp after a failure and its hold-down stays a ramp
  g.carrier(false, t + 1s);
  g.carrier(true, t + 2s);
  for (int ms = 2100; ms <= 20000 && g.state() != RailState::Ramping; ms += 100)
    g.tick(t + std::chrono::milliseconds(ms));
  ASSERT_EQ(g.state(), RailState::Ramping) << g.reason();
  g.bfd(bfd::State::Up, bfd::Diag::None, false, t + 12500ms);
  EXPECT_EQ(g.state(), RailState::Ramping) << "a rail that failed is not let back at once";
}

TEST(PathHealth, ASuspicionWithNoSessionYetOnARailThatHadOneIsNotCleared) {
  T t{};
  PathHealth h(fast(), t);
  h.inherit(RailState::Up, true, t);  // the session was up before a restart
  h.evidence("a burst of RTOs", 1500ms, t + 1s);
  h.tick(t + 2600ms);
  EXPECT_EQ(h.state(), RailState::Down) << h.reason();
  EXPECT_TRUE(h.awaiting_bfd());
  EXPECT_FALSE(h.alive());
  h.bfd(bfd::State::Down, bfd::Diag::None, false, t + 3s);
  EXPECT_EQ(h.state(), RailState::Down);
  h.bfd(bfd::State::Up, bfd::Diag::None, false, t + 4s);
  EXPECT_EQ(h.state(), RailState::Holddown) << "the usual way back: hold-down, then the ramp";
}

TEST(PathHealth, AnInheritedFailureWaitsForBfdOrWithoutItServesTheHolddown) {
  T t{};
  for (auto was : {RailState::Suspect, RailState::Down, RailState::Holddown, RailState::Ramping}) {
    PathHealth h(fast(), t);
    h.inherit(was, true, t);
    EXPECT_EQ(h.state(), RailState::Down) << to_string(was);
    EXPECT_EQ(h.weight(), 0);
    auto ev = h.take_events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_TRUE(ev[0].inherited);
    for (int s = 1; s <= 60; ++s) h.tick(t + std::chrono::seconds(s));
    EXPECT_EQ(h.state(), RailState::Down) << "time alone is no evidence";
    h.bfd(bfd::State::Up, bfd::Diag::None, false, t + 61s);
    EXPECT_EQ(h.state(), RailState::Holddown);
  }
  PathHealth nobfd(fast(), t);
  nobfd.inherit(RailState::Down, false, t);
  EXPECT_EQ(nobfd.state(), RailState::Holddown) << nobfd.reason();
  for (int s = 1; s <= 11; ++s) nobfd.tick(t + std::chrono::seconds(s));
  EXPECT_EQ(nobfd.state(), RailState::Ramping);
  PathHealth up(fast(), t);
  up.inherit(RailState::Up, true, t);
  EXPECT_EQ(up.state(), RailState::Up);
  EXPECT_TRUE(up.take_events().empty());
  PathHealth drained(fast(), t);
  drained.inherit(RailState::Drained, true, t);
  EXPECT_EQ(drained.state(), RailState::Drained) << "an operator's drain survives a restart";
  drained.drain(false, t + 1s);
  EXPECT_EQ(drained.state(), RailState::Ramping);
}

TEST(PathHealth, DrainAndUndrainRampWithoutHolddown) {
  T t{};
  PathHealth h(fast(), t);
  h.drain(true, t);
  EXPECT_EQ(h.state(), RailState::Drained);
  EXPECT_EQ(h.weight(), 0);
  h.carrier(false, t + 1s);
  EXPECT_EQ(h.state(), RailState::Down);
  h.carrier(true, t + 2s);
  EXPECT_EQ(h.state(), RailState::Drained) << "back, but still drained";
  h.drain(false, t + 3s);
  EXPECT_EQ(h.state(), RailState::Ramping);
  EXPECT_DOUBLE_EQ(h.weight(), 0.10);
}

std::vector<HealthView> views(std::vector<double> w) {
  std::vector<HealthView> v;
  for (double x : w) v.push_back({x, true, true, 1e9});
  return v;
}

TEST(ApplyHealth, ADownRailLosesItsShareToTheOthers) {
  auto s = apply_health({7000, 3000}, {}, views({0, 1}), false);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, (Shares{0, 10000}));
}

TEST(ApplyHealth, ARampingRailGetsItsFormerShareTimesTheStep) {
  // the class had 80% on rail0 before it failed; the scheduler has it all on rail1
  auto s = apply_health({0, 10000}, {0.8, 0.2}, views({0.25, 1}), false);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, (Shares{2000, 8000}));
  s = apply_health({0, 10000}, {0.0, 1.0}, views({0.25, 1}), false);
  EXPECT_EQ(*s, (Shares{0, 10000})) << "a class that was not there gets nothing back";
}

TEST(ApplyHealth, SuspectMovesOnlyLatencySensitiveClasses) {
  auto v = views({1, 1});
  v[0].latency_ok = false;
  EXPECT_EQ(*apply_health({10000, 0}, {}, v, true), (Shares{0, 10000}));
  EXPECT_EQ(*apply_health({10000, 0}, {}, v, false), (Shares{10000, 0}));
}

TEST(ApplyHealth, NoRailWithWeightUsesAliveRailsAndNoneAliveKeepsTheLast) {
  auto v = views({0, 0});
  v[1].alive = false;  // rail0 is back (in hold-down), rail1 is dead
  EXPECT_EQ(*apply_health({0, 10000}, {}, v, false), (Shares{10000, 0}));
  v[1].alive = true;  // both back, both in hold-down: as the scheduler had it
  EXPECT_EQ(*apply_health({7000, 3000}, {}, v, false), (Shares{7000, 3000}));
  v[0].alive = v[1].alive = false;
  EXPECT_FALSE(apply_health({0, 10000}, {}, v, false).has_value());
}

TEST(ApplyHealth, WithNoneAliveARailWithCarrierIsTriedWhileAnotherHasNone) {
  auto v = views({0, 0});
  v[0].alive = v[1].alive = false;
  v[0].carrier = false;
  auto s = apply_health({DP_SHARE_SCALE, 0}, {0, 0}, v, false);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, (Shares{0, DP_SHARE_SCALE}));
  v[0].carrier = true;  // both with carrier and neither forwarding (a blackhole)
  EXPECT_FALSE(apply_health({DP_SHARE_SCALE, 0}, {0, 0}, v, false)) << "keep the last decisions";
}

TEST(ApplyHealth, SharesAlwaysSumToTheScale) {
  for (double w : {0.1, 0.25, 0.5}) {
    auto s = apply_health({3333, 6667}, {0.333, 0.667}, views({w, 1}), false);
    ASSERT_TRUE(s);
    EXPECT_EQ((*s)[0] + (*s)[1], DP_SHARE_SCALE);
  }
}

TEST(ApplyHealth, FailbackRestoresTheFormerShareAndScalesTheRest) {
  EXPECT_EQ(restore_share({0, 10000}, 0, 0.8), (Shares{8000, 2000}));
  EXPECT_EQ(restore_share({0, 6000, 4000}, 0, 0.5), (Shares{5000, 3000, 2000}));
  EXPECT_EQ(restore_share({0, 0}, 0, 0.3), (Shares{10000, 0})) << "nothing elsewhere: all back";
}

}  // namespace
}  // namespace dp

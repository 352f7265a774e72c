// SPDX-License-Identifier: Apache-2.0
// The controller's plans, without root: the failover cases the lab shows with
// real traffic (carrier loss, data-path evidence, hold-down and ramp, both
// rails down, drain, operator pins across a reload), and its scheduling.
// Each plan is checked for what it writes, in which order relative to
// routing, and what it records.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>

#include "dualpath/abi.h"
#include "dualpath/core/controller.h"
#include "dualpath/core/encode.h"

namespace dp {
namespace {

using namespace std::chrono_literals;
using T = SchedClock::time_point;

constexpr uint16_t kAll = DP_SHARE_SCALE;

// A lab policy with short health timers (hold-down 10 s, ramp steps of 2 s).
Policy lab_policy(bool adaptive, const std::string& file = "lab-a.toml") {
  auto load = load_policy_file(DP_POLICY_DIR "/" + file);
  EXPECT_TRUE(load.ok());
  Policy p = *load.policy;
  p.scheduler.adaptive = adaptive;
  p.health.holddown = 10s;
  p.health.ramp = {10, 25, 50, 100};
  p.health.ramp_interval = 2s;
  return p;
}

size_t klass(const Policy& p, const std::string& name) {
  return static_cast<size_t>(p.class_index(name));
}

// A controller with the lab policy applied and its first plan carried out.
struct Fixture {
  Policy policy;
  Controller c;
  T t = T(std::chrono::hours(1));

  explicit Fixture(bool adaptive = false, const std::string& file = "lab-a.toml",
                   const std::function<void(Policy&)>& edit = nullptr)
      : policy(edited(lab_policy(adaptive, file), edit)) {
    c.set_policy(policy, {true, true}, {false, false}, {}, t);
    carry_out(c.settle(t));
  }
  static Policy edited(Policy p, const std::function<void(Policy&)>& edit) {
    if (edit) edit(p);
    return p;
  }
  // What the daemon does with a plan when every write and route succeeds.
  void carry_out(const Plan& plan) {
    for (auto& w : plan.writes) c.written(w);
    if (plan.route_around) c.routed(*plan.route_around);
  }
  const DecisionWrite* write_of(const Plan& plan, const std::string& name) {
    for (auto& w : plan.writes)
      if (w.klass == klass(policy, name)) return &w;
    return nullptr;
  }
  TickInput quiet(T now) const {
    TickInput in;
    in.now = now;
    in.rails.resize(policy.paths.size());
    in.class_tx_bytes.assign(policy.classes.size(), 0);
    return in;
  }
};

bool has_event(const Plan& plan, const std::string& text) {
  return std::any_of(plan.events.begin(), plan.events.end(), [&](const SchedulerEvent& e) {
    return e.reason.find(text) != std::string::npos;
  });
}

TEST(Controller, TheFirstPlanPutsEveryClassOnItsPreferredRailAndRoutesNothingAround) {
  Policy p = lab_policy(false);
  Controller c;
  T t{};
  c.set_policy(p, {true, true}, {false, false}, {}, t);
  Plan plan = c.settle(t);
  ASSERT_EQ(plan.writes.size(), p.classes.size());
  for (auto& w : plan.writes) {
    size_t prefer = static_cast<size_t>(p.path_index(p.classes[w.klass].prefer));
    Shares want(p.paths.size(), 0);
    want[prefer] = kAll;
    EXPECT_EQ(w.shares, want) << p.classes[w.klass].name;
    EXPECT_FALSE(w.event) << "a first write is no move";
  }
  EXPECT_FALSE(plan.route_around);
  EXPECT_TRUE(plan.events.empty());
  for (auto& w : plan.writes) c.written(w);
  EXPECT_TRUE(c.settle(t).writes.empty()) << "nothing changed: nothing is written again";
}

TEST(Controller, CarrierLossMovesEveryClassOffTheRailThenRoutesAroundIt) {
  Fixture f;
  f.c.carrier(0, false, f.t + 1s);
  Plan plan = f.c.settle(f.t + 1s);
  EXPECT_EQ(f.c.health(0).state(), RailState::Down);
  EXPECT_TRUE(has_event(plan, "rail0 up -> down: carrier lost"));
  for (auto name : {"expert-dispatch", "expert-combine", "control"}) {
    auto* w = f.write_of(plan, name);
    ASSERT_NE(w, nullptr) << name;
    EXPECT_EQ(w->shares, (Shares{0, kAll})) << name;
    ASSERT_TRUE(w->event) << name << ": a move by path health is recorded";
    EXPECT_EQ(w->event->kind, "health");
  }
  EXPECT_EQ(f.write_of(plan, "param-sync"), nullptr) << "already on rail1";
  ASSERT_TRUE(plan.route_around);
  EXPECT_EQ(*plan.route_around, (std::vector<bool>{true, false}));
  f.carry_out(plan);
  Plan again = f.c.settle(f.t + 2s);
  EXPECT_TRUE(again.writes.empty());
  EXPECT_FALSE(again.route_around) << "routing is rewritten once";
}

TEST(Controller, FailbackWaitsOutTheHolddownThenRampsTheFormerShareBack) {
  Fixture f;
  f.c.carrier(0, false, f.t);
  f.carry_out(f.c.settle(f.t));
  f.c.carrier(0, true, f.t + 1s);
  Plan back = f.c.settle(f.t + 1s);
  EXPECT_EQ(f.c.health(0).state(), RailState::Holddown);
  EXPECT_TRUE(back.writes.empty()) << "no traffic inside the hold-down";
  EXPECT_FALSE(back.route_around);
  f.carry_out(back);
  // 10 s hold-down, then ramp steps of 2 s: 10%, 25%, 50%, up
  Plan ramp = f.c.tick(f.quiet(f.t + 11s));
  EXPECT_EQ(f.c.health(0).state(), RailState::Ramping);
  auto* w = f.write_of(ramp, "expert-combine");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shares[0], kAll / 10) << "10% of its former share";
  auto* ls = f.write_of(ramp, "control");
  ASSERT_NE(ls, nullptr) << "latency-sensitive classes ramp back too";
  EXPECT_EQ(ls->shares[0], kAll / 10);
  ASSERT_TRUE(ramp.route_around);
  EXPECT_EQ(*ramp.route_around, (std::vector<bool>{false, false})) << "routing restored";
  f.carry_out(ramp);
  std::vector<uint16_t> steps{w->shares[0]};
  for (int s = 12; s <= 20; ++s) {
    Plan p = f.c.tick(f.quiet(f.t + std::chrono::seconds(s)));
    if (auto* x = f.write_of(p, "expert-combine")) steps.push_back(x->shares[0]);
    f.carry_out(p);
  }
  EXPECT_EQ(f.c.health(0).state(), RailState::Up);
  ASSERT_GE(steps.size(), 3u);
  EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end())) << "the share only grows";
  EXPECT_EQ(steps.back(), kAll) << "the former share is back";
}

// A quiet tick, then one where rail0's flows had 2 RTOs and retransmitted
// half of what they sent (or what is given) while rail1's were clean: the
// plan of that tick.
Plan evidence_against_rail0(Fixture& f, uint64_t segs = 100, uint64_t retrans = 50,
                            uint64_t rtos = 2) {
  TickInput in = f.quiet(f.t + 1s);
  f.carry_out(f.c.tick(in));
  in.now += 50ms;
  in.rails[0].tcp.segs_out = segs;
  in.rails[0].tcp.retrans_segs = retrans;
  in.rails[0].tcp.rto_events = rtos;
  in.rails[1].tcp.segs_out = 1000;
  return f.c.tick(in);
}

TEST(Controller, DataPathEvidenceMovesLatencySensitiveClassesBeforeBfdCanTell) {
  Fixture f;
  Plan plan = evidence_against_rail0(f);
  EXPECT_EQ(f.c.health(0).state(), RailState::Suspect);
  for (auto name : {"expert-dispatch", "control"}) {
    auto* w = f.write_of(plan, name);
    ASSERT_NE(w, nullptr) << name;
    EXPECT_EQ(w->shares, (Shares{0, kAll})) << name;
  }
  EXPECT_FALSE(plan.route_around) << "a suspect rail still forwards: routing stays";
  // [health] suspect_moves = "all" (the default): elastic classes too
  auto* combine = f.write_of(plan, "expert-combine");
  ASSERT_NE(combine, nullptr);
  EXPECT_EQ(combine->shares, (Shares{0, kAll}));
}

TEST(Controller, TheEvidenceSaysWhatItCountedAlsoWhenNothingWasAcknowledged) {
  Fixture f;
  evidence_against_rail0(f);
  EXPECT_NE(f.c.health(0).reason().find(
                "2 RTOs and 50 of 100 segments retransmitted in 50ms, 0 acknowledged"),
            std::string::npos)
      << f.c.health(0).reason();
  // a blackhole: segments sent are counted at ACKs, and none came
  Fixture g;
  evidence_against_rail0(g, 0, 1, 1);
  ASSERT_EQ(g.c.health(0).state(), RailState::Suspect);
  EXPECT_NE(
      g.c.health(0).reason().find("1 RTO and 1 segment retransmitted in 50ms, 0 acknowledged"),
      std::string::npos)
      << "not '1 of 0 segments': " << g.c.health(0).reason();
}

TEST(Controller, ElasticClassesMayBeToldToWaitForBfd) {
  Fixture f;
  Policy p = f.policy;
  p.health.suspect_moves_elastic = false;  // suspect_moves = "latency_sensitive"
  f.c.set_policy(p, {true, true}, {false, false}, {}, f.t);
  f.carry_out(f.c.settle(f.t));
  Plan plan = evidence_against_rail0(f);
  ASSERT_EQ(f.c.health(0).state(), RailState::Suspect);
  EXPECT_NE(f.write_of(plan, "control"), nullptr) << "latency-sensitive classes move";
  EXPECT_EQ(f.write_of(plan, "expert-combine"), nullptr) << "elastic ones stay";
}

TEST(Controller, EvidenceIsNotTakenAgainstABusyRailThatDeliversOrTheLastGoodOne) {
  // ticks of 50 ms; rail0 busy, its flows acknowledged `acks` times a tick
  auto run = [](Fixture& f, double util, uint64_t bad_tick_acks) {
    TickInput in = f.quiet(f.t + 1s);
    for (int i = 0; i < 20; ++i) {  // clean ticks: 40 ACKs each
      in.now += 50ms;
      in.rails[0].utilisation = util;
      in.rails[0].tcp.segs_out += 4000;
      in.rails[0].tcp.rtt_samples += 40;
      f.carry_out(f.c.tick(in));
    }
    in.now += 50ms;  // RTOs, 12% retransmitted
    in.rails[0].tcp.segs_out += 4000;
    in.rails[0].tcp.retrans_segs += 480;
    in.rails[0].tcp.rto_events += 2;
    in.rails[0].tcp.rtt_samples += bad_tick_acks;
    f.carry_out(f.c.tick(in));
  };
  {
    Fixture f;
    run(f, 0.95, 30);
    EXPECT_EQ(f.c.health(0).state(), RailState::Up)
        << "retransmits on a full rail whose flows still deliver are congestion";
  }
  {
    Fixture f;
    run(f, 0.95, 0);
    EXPECT_EQ(f.c.health(0).state(), RailState::Suspect)
        << "a busy rail whose flows deliver nothing is failing, whatever its utilisation";
  }
  {
    Fixture f;
    run(f, 0.95, 4);
    EXPECT_EQ(f.c.health(0).state(), RailState::Suspect) << "a tenth of its deliveries: failing";
  }
  {
    Fixture f;
    f.c.carrier(1, false, f.t);
    f.carry_out(f.c.settle(f.t));
    run(f, 0.1, 0);
    EXPECT_EQ(f.c.health(0).state(), RailState::Up) << "never against the last good rail";
  }
}

// Both rails have a bad tick at once. When the other rail's is explained
// (full and still delivering), rail0's failure is judged in the same tick;
// when both look failed, it may be the node's own trouble: neither is taken.
TEST(Controller, ARailsEvidenceIsJudgedBesideACongestedRailButNotBesideAFailingOne) {
  auto run = [](Fixture& f, uint64_t rail1_bad_tick_acks) {
    TickInput in = f.quiet(f.t + 1s);
    for (int i = 0; i < 20; ++i) {  // clean ticks: rail0 light, rail1 full
      in.now += 50ms;
      in.rails[0].utilisation = 0.3;
      in.rails[0].tcp.segs_out += 400;
      in.rails[0].tcp.rtt_samples += 20;
      in.rails[1].utilisation = 0.95;
      in.rails[1].tcp.segs_out += 4000;
      in.rails[1].tcp.rtt_samples += 40;
      f.carry_out(f.c.tick(in));
    }
    in.now += 50ms;  // rail0: only retransmissions, nothing acknowledged
    in.rails[0].tcp.segs_out += 10;
    in.rails[0].tcp.retrans_segs += 10;
    in.rails[0].tcp.rto_events += 3;
    // rail1: RTOs and 12% retransmitted, with `acks` acknowledgements
    in.rails[1].tcp.segs_out += 4000;
    in.rails[1].tcp.retrans_segs += 480;
    in.rails[1].tcp.rto_events += 2;
    in.rails[1].tcp.rtt_samples += rail1_bad_tick_acks;
    f.carry_out(f.c.tick(in));
  };
  {
    Fixture f;
    run(f, 40);
    EXPECT_EQ(f.c.health(0).state(), RailState::Suspect)
        << "rail1's RTOs are its congestion: rail0's evidence stands in the same tick";
    EXPECT_EQ(f.c.health(1).state(), RailState::Up);
    EXPECT_EQ(f.c.discounted(1).congested, 1u);
  }
  {
    Fixture f;
    run(f, 0);
    EXPECT_EQ(f.c.health(0).state(), RailState::Up) << "both rails failing at once";
    EXPECT_EQ(f.c.health(1).state(), RailState::Up);
  }
}

// Data-path evidence replayed from the lab: node a's counters tick by tick
// while iperf3 filled rail0 (tests/evidence/*.json, made by
// tests/evidence/record), through a fault or none.
struct EvidenceReplay {
  std::optional<int64_t> fault_at_ms, suspected_at_ms;
  int bad_ticks = 0;                       // ticks with an RTO and over 10% retransmitted
  uint64_t congested = 0, peer_queue = 0;  // rail0's discounted ticks
  size_t suspected_rail = 0;               // (replay_receiver: the first suspected)
};

// A trace row's rails (utilisation and their flows' TCP counters), if it has them.
void read_rails(const nlohmann::json& step, TickInput& tick) {
  if (!step.contains("rails")) return;
  for (size_t i = 0; i < tick.rails.size() && i < step["rails"].size(); ++i) {
    const auto& r = step["rails"][i];
    tick.rails[i].utilisation = r["util"].get<double>();
    tick.rails[i].tcp.segs_out = r["segs_out"].get<uint64_t>();
    tick.rails[i].tcp.retrans_segs = r["retrans_segs"].get<uint64_t>();
    tick.rails[i].tcp.rto_events = r["rto_events"].get<uint64_t>();
    tick.rails[i].tcp.rtt_samples = r["rtt_samples"].get<uint64_t>();
  }
}

nlohmann::json evidence_trace(const std::string& name) {
  std::ifstream in(std::string(DP_SOURCE_DIR) + "/tests/evidence/" + name + ".json");
  return nlohmann::json::parse(in);
}

EvidenceReplay replay_evidence(const std::string& name) {
  auto trace = evidence_trace(name);
  EvidenceReplay out;
  if (!trace["fault_at_ms"].is_null()) out.fault_at_ms = trace["fault_at_ms"].get<int64_t>();
  Fixture f;
  T start = f.t + 1s;
  TcpCounters prev;
  for (const auto& step : trace["steps"]) {
    TickInput tick = f.quiet(start + std::chrono::milliseconds(step["t_ms"].get<int64_t>()));
    read_rails(step, tick);
    const TcpCounters& now = tick.rails[0].tcp;
    if (prev.segs_out && now.rto_events > prev.rto_events &&
        (now.retrans_segs - prev.retrans_segs) * 10 >
            std::max<uint64_t>(now.segs_out - prev.segs_out, 1))
      ++out.bad_ticks;
    prev = now;
    f.carry_out(f.c.tick(tick));
    if (!out.suspected_at_ms && f.c.health(0).state() == RailState::Suspect)
      out.suspected_at_ms = step["t_ms"].get<int64_t>();
  }
  out.congested = f.c.discounted(0).congested;
  out.peer_queue = f.c.discounted(0).peer_queue;
  return out;
}

TEST(Controller, ABusyRailBlackholedIsSuspectedByWhatItDeliversBeforeBfdCanTell) {
  for (auto name : {"blackhole", "loss30"}) {
    EvidenceReplay r = replay_evidence(name);
    ASSERT_TRUE(r.fault_at_ms) << name;
    ASSERT_TRUE(r.suspected_at_ms) << name << ": a busy rail was never suspected";
    EXPECT_GT(*r.suspected_at_ms, *r.fault_at_ms) << name << ": suspected before the fault";
    // BFD's detection time in the lab policy is 1.5 s
    EXPECT_LT(*r.suspected_at_ms - *r.fault_at_ms, 1500) << name;
  }
}

// The receiving end of the same traces (node b): what arrived of each class
// on each rail, tick by tick, and, where the trace has them (moe), b's own
// rails as its daemon measured them, with their capacities. In the iperf3
// traces b's flows only acknowledge, so they never have an RTO of their own.
EvidenceReplay replay_receiver(const std::string& name,
                               const std::function<void(nlohmann::json&)>& edit = nullptr) {
  auto trace = evidence_trace(name);
  if (edit) edit(trace);
  EvidenceReplay out;
  if (!trace["fault_at_ms"].is_null()) out.fault_at_ms = trace["fault_at_ms"].get<int64_t>();
  const auto& first = trace["b_steps"].at(0);
  Fixture f(false, "lab-b.toml", [&](Policy& p) {
    if (!first.contains("rails")) return;
    for (size_t i = 0; i < p.paths.size() && i < first["rails"].size(); ++i)
      p.paths[i].capacity_bps = first["rails"][i]["capacity_bps"].get<uint64_t>();
  });
  T start = f.t + 1s;
  for (const auto& step : trace["b_steps"]) {
    TickInput tick = f.quiet(start + std::chrono::milliseconds(step["t_ms"].get<int64_t>()));
    tick.class_path_rx_bytes.assign(f.policy.classes.size(),
                                    std::vector<uint64_t>(f.policy.paths.size(), 0));
    for (auto& [klass_name, by_path] : step["rx_bytes"].items()) {
      int c = f.policy.class_index(klass_name);
      if (c < 0) continue;
      for (size_t p = 0; p < by_path.size() && p < f.policy.paths.size(); ++p)
        tick.class_path_rx_bytes[static_cast<size_t>(c)][p] = by_path[p].get<uint64_t>();
    }
    read_rails(step, tick);
    f.carry_out(f.c.tick(tick));
    for (size_t i = 0; i < f.policy.paths.size() && !out.suspected_at_ms; ++i)
      if (f.c.health(i).state() == RailState::Suspect) {
        out.suspected_at_ms = step["t_ms"].get<int64_t>();
        out.suspected_rail = i;
      }
  }
  out.congested = f.c.discounted(0).congested;
  out.peer_queue = f.c.discounted(0).peer_queue;
  return out;
}

TEST(Controller, AReceiverWhosePeerMovedOffABlackholedRailSuspectsItBeforeBfdCanTell) {
  EvidenceReplay r = replay_receiver("blackhole");
  ASSERT_TRUE(r.fault_at_ms);
  ASSERT_TRUE(r.suspected_at_ms) << "b's ACKs stayed on the blackholed rail";
  EXPECT_EQ(r.suspected_rail, 0u);
  EXPECT_GT(*r.suspected_at_ms, *r.fault_at_ms) << "suspected before the fault";
  EXPECT_LT(*r.suspected_at_ms - *r.fault_at_ms, 1500) << "no sooner than BFD";
}

TEST(Controller, AReceiverDoesNotSuspectARailThePeerLeftForItsOwnReasons) {
  // a's operator moved the class to rail1 at full rate; a saturated rail; a
  // rail that drops what exceeds 800 Mbit/s
  for (auto name : {"move", "none", "congested"}) {
    EvidenceReplay r = replay_receiver(name);
    EXPECT_FALSE(r.suspected_at_ms) << name << ": suspected at " << *r.suspected_at_ms << " ms";
  }
}

// The saturated rail's trace (expert-dispatch at line rate on rail0), ended at
// `end_ms`: nothing more arrives on rail0, and `extra` bytes of the class
// arrive on rail1 at the given times (a bare ACK is 66 bytes).
void end_and_arrive(nlohmann::json& trace, int64_t end_ms,
                    std::vector<std::pair<int64_t, uint64_t>> extra) {
  uint64_t frozen = 0, on1 = 0;
  for (auto& step : trace["b_steps"]) {
    int64_t t = step["t_ms"].get<int64_t>();
    auto& by_path = step["rx_bytes"]["expert-dispatch"];
    if (t < end_ms) {
      frozen = by_path[0].get<uint64_t>();
      continue;
    }
    by_path[0] = frozen;
    for (auto [at, bytes] : extra)
      if (t >= at && t < at + 50) on1 += bytes;
    by_path[1] = on1;
  }
}

TEST(Controller, AReceiverDoesNotSuspectARailWhoseTrafficEndedWithStrayPacketsOnTheOther) {
  using Arrivals = std::vector<std::pair<int64_t, uint64_t>>;
  auto replay = [](Arrivals extra) {
    return replay_receiver("none", [&](nlohmann::json& t) { end_and_arrive(t, 4000, extra); });
  };
  // the class ends on rail0 and its last bare ACKs and FIN come over rail1
  // (two lab tests' false suspicions in CI)
  for (const Arrivals& stray : {Arrivals{{4000, 66}}, Arrivals{{4000, 66}, {4150, 66}},
                                Arrivals{{4000, 66}, {4050, 66}, {4100, 66}, {4300, 66}}}) {
    EvidenceReplay r = replay(stray);
    EXPECT_FALSE(r.suspected_at_ms)
        << stray.size() << " bare packets: suspected at " << *r.suspected_at_ms << " ms";
  }
  // a retransmitted data segment alone is a move
  EvidenceReplay segment = replay({{4000, 1514}});
  ASSERT_TRUE(segment.suspected_at_ms);
  EXPECT_LT(*segment.suspected_at_ms, 4050);
  // a small arrival, then a retransmission within the window
  EvidenceReplay later = replay({{4000, 66}, {4150, 1514}});
  ASSERT_TRUE(later.suspected_at_ms);
  EXPECT_GE(*later.suspected_at_ms, 4150);
  // a second small arrival after the window begins a wait of its own
  EvidenceReplay late = replay({{4000, 66}, {4700, 66}, {4750, 66}});
  EXPECT_FALSE(late.suspected_at_ms) << "suspected at " << *late.suspected_at_ms << " ms";
  // a small arrival, then the class at full rate there: a move the peer made
  // for its own reasons
  EvidenceReplay full = replay({{4000, 66}, {4050, 3'000'000}, {4100, 3'000'000}});
  EXPECT_FALSE(full.suspected_at_ms) << "suspected at " << *full.suspected_at_ms << " ms";
}

TEST(Controller, ASaturatedHealthyRailIsNeverSuspected) {
  EvidenceReplay quiet = replay_evidence("none");
  EXPECT_FALSE(quiet.suspected_at_ms) << "suspected at " << *quiet.suspected_at_ms << " ms";
  // a rail that drops what exceeds 800 Mbit/s: retransmits and RTOs, and
  // deliveries that go on
  EvidenceReplay congested = replay_evidence("congested");
  EXPECT_GT(congested.bad_ticks, 0) << "the trace must have ticks evidence would look at";
  EXPECT_FALSE(congested.suspected_at_ms) << "suspected at " << *congested.suspected_at_ms << " ms";
  EXPECT_GT(congested.congested, 0u) << "discounted ticks are counted (metrics, path list)";
}

// b's side of dp-load's MoE workload on 400 + 100 Mbit rails (the lab in
// static mode; tests/evidence/record OUT moe): while a's dispatch round fills
// rail0 toward b, b's control replies (latency-sensitive, rto_min 10 ms) time
// out, their ACKs queued in a's rail0 behind the round. Taken as evidence,
// every class left a healthy rail for 1.5 s.
TEST(Controller, AnRtoWhileTheRailsInboundArrivesAtLineRateIsTheQueueNotAFailure) {
  auto trace = evidence_trace("moe");
  int spurious = 0;  // ticks with an RTO, over 10% retransmitted, inbound at line rate
  const auto& steps = trace["b_steps"];
  for (size_t k = 1; k < steps.size(); ++k) {
    const auto &r = steps[k]["rails"][0], &p = steps[k - 1]["rails"][0];
    uint64_t rx = 0;
    for (auto& [klass_name, by_path] : steps[k]["rx_bytes"].items())
      rx += by_path[0].get<uint64_t>() - steps[k - 1]["rx_bytes"][klass_name][0].get<uint64_t>();
    double secs = (steps[k]["t_ms"].get<double>() - steps[k - 1]["t_ms"].get<double>()) / 1000;
    uint64_t segs = r["segs_out"].get<uint64_t>() - p["segs_out"].get<uint64_t>();
    uint64_t retrans = r["retrans_segs"].get<uint64_t>() - p["retrans_segs"].get<uint64_t>();
    if (r["rto_events"].get<uint64_t>() > p["rto_events"].get<uint64_t>() &&
        retrans * 10 > std::max<uint64_t>(segs, 1) &&
        static_cast<double>(rx) * 8 / secs >= 0.8 * r["capacity_bps"].get<double>())
      ++spurious;
  }
  ASSERT_GT(spurious, 0) << "the trace must have the spurious RTO";
  EvidenceReplay r = replay_receiver("moe");
  EXPECT_FALSE(r.suspected_at_ms) << "suspected at " << *r.suspected_at_ms << " ms";
  EXPECT_GT(r.peer_queue, 0u) << "discounted ticks are counted (metrics, path list)";
}

// b's side of the overlap workload (two steps in flight) with a's classes
// placed by bursts (tests/evidence/record OUT moe, adaptive mode): at 18.07 s
// a's next logs burst went to rail0, only its first segment arrived in the
// tick, and nothing of logs came over rail1, while rail1 carried 1.5 MB of
// expert-dispatch. Taken as the peer's retransmissions, b left a healthy
// rail1 for 1.5 s (in dp-lab bench, once every few minutes).
TEST(Controller, AReceiverDoesNotSuspectARailThatStillDeliversWhenOneClassMovesOff) {
  EvidenceReplay r = replay_receiver("moe-overlap");
  EXPECT_FALSE(r.suspected_at_ms) << "suspected at " << *r.suspected_at_ms << " ms";
  // the same trace with nothing arriving on rail1 from 18 s, and a's logs
  // coming over rail0 a segment a tick (retransmissions b does not answer):
  // a failure of rail1
  EvidenceReplay failed = replay_receiver("moe-overlap", [](nlohmann::json& t) {
    nlohmann::json frozen;
    uint64_t trickle = 0;
    for (auto& step : t["b_steps"]) {
      auto& rx = step["rx_bytes"];
      if (step["t_ms"].get<int64_t>() < 18000) {
        frozen = rx;
        continue;
      }
      for (auto& [klass_name, by_path] : rx.items()) by_path[1] = frozen[klass_name][1];
      trickle += 1514;
      rx["logs"][0] = frozen["logs"][0].get<uint64_t>() + trickle;
    }
  });
  ASSERT_TRUE(failed.suspected_at_ms) << "rail1 went silent and logs trickled in on rail0";
  EXPECT_EQ(failed.suspected_rail, 1u);
  EXPECT_GE(*failed.suspected_at_ms, 18000);
  EXPECT_LT(*failed.suspected_at_ms, 18200);
}

// The same trace, with rail0 failing at 3 s: b's RTOs go on, but nothing of
// b's data is acknowledged any more, and either nothing arrives (both ways)
// or what arrives still does (b's outbound alone): suspected either way.
TEST(Controller, ARailWhoseInboundStillArrivesIsSuspectedWhenNothingItSendsIsAcknowledged) {
  for (bool inbound_lives : {false, true}) {
    EvidenceReplay r = replay_receiver("moe", [&](nlohmann::json& t) {
      nlohmann::json frozen;
      uint64_t rtos = 0;
      for (auto& step : t["b_steps"]) {
        if (step["t_ms"].get<int64_t>() < 3000) {
          frozen = step;
          continue;
        }
        auto& rail = step["rails"][0];
        rail["rtt_samples"] = frozen["rails"][0]["rtt_samples"];
        rail["segs_out"] = frozen["rails"][0]["segs_out"];
        rail["rto_events"] = frozen["rails"][0]["rto_events"].get<uint64_t>() + ++rtos;
        rail["retrans_segs"] = frozen["rails"][0]["retrans_segs"].get<uint64_t>() + rtos;
        if (!inbound_lives)
          for (auto& [klass_name, by_path] : step["rx_bytes"].items())
            by_path[0] = frozen["rx_bytes"][klass_name][0];
      }
      t["fault_at_ms"] = 3000;
    });
    ASSERT_TRUE(r.suspected_at_ms) << (inbound_lives ? "outbound" : "both ways");
    EXPECT_GE(*r.suspected_at_ms, 3000);
    EXPECT_LT(*r.suspected_at_ms, 3200);
  }
}

TEST(Controller, BothRailsDownKeepsTheLastDecisionsAndSaysSoOnce) {
  Fixture f;
  f.c.carrier(0, false, f.t);
  f.carry_out(f.c.settle(f.t));
  f.c.carrier(1, false, f.t + 1s);
  Plan plan = f.c.settle(f.t + 1s);
  EXPECT_TRUE(f.c.all_down());
  EXPECT_TRUE(plan.writes.empty()) << "the last decisions stay";
  EXPECT_FALSE(plan.route_around) << "the last routing stays";
  EXPECT_TRUE(has_event(plan, "every path is down"));
  EXPECT_EQ(f.c.paths_carrying(), 0u);
  EXPECT_FALSE(has_event(f.c.settle(f.t + 2s), "every path is down")) << "said once";
  // the first rail back carries at once: no hold-down while nothing else carries
  f.c.carrier(1, true, f.t + 3s);
  Plan back = f.c.settle(f.t + 3s);
  EXPECT_FALSE(f.c.all_down());
  EXPECT_EQ(f.c.health(1).state(), RailState::Up) << f.c.health(1).reason();
  EXPECT_TRUE(has_event(back, "no other path carries traffic"));
  EXPECT_EQ(f.c.paths_carrying(), 1u);
  EXPECT_FALSE(back.route_around) << "rail0 stayed routed around, rail1 never was";
  EXPECT_TRUE(back.writes.empty()) << "every class was left on rail1";
  f.carry_out(back);
  // the next rail back is held down and ramped behind it, as usual
  f.c.carrier(0, true, f.t + 6s);
  Plan next = f.c.settle(f.t + 6s);
  EXPECT_EQ(f.c.health(0).state(), RailState::Holddown);
  EXPECT_TRUE(next.writes.empty()) << "no traffic on rail0 inside its hold-down";
  f.carry_out(next);
  for (int s = 7; s <= 30 && f.c.health(0).state() != RailState::Up; ++s)
    f.carry_out(f.c.tick(f.quiet(f.t + std::chrono::seconds(s))));
  EXPECT_EQ(f.c.health(0).state(), RailState::Up) << f.c.health(0).reason();
  for (auto name : {"expert-dispatch", "expert-combine", "control"})
    EXPECT_EQ(f.c.written_shares(klass(f.policy, name)), (Shares{kAll, 0}))
        << name << " is back on its rail";
}

// After both rails were down, the connections that backed off retransmit
// onto a rail as it comes back: one more RTO among them, in its first tick,
// is the outage's echo. The same evidence once BFD's detection time has
// passed (1.5 s in the lab policy) ends the ramp, as it would have at once.
TEST(Controller, ALoneRtoAsARailComesBackIsNotEvidenceUntilBfdCouldTell) {
  Fixture f;
  f.c.carrier(0, false, f.t);
  f.c.carrier(1, false, f.t);
  f.carry_out(f.c.settle(f.t));
  f.c.carrier(1, true, f.t + 1s);  // the first back: up at once
  f.carry_out(f.c.settle(f.t + 1s));
  f.c.carrier(0, true, f.t + 2s);  // the second: hold-down, then the ramp
  f.carry_out(f.c.settle(f.t + 2s));
  T now = f.t + 2s;
  while (f.c.health(0).state() != RailState::Ramping && now < f.t + 30s) {
    now += 50ms;
    f.carry_out(f.c.tick(f.quiet(now)));
  }
  ASSERT_EQ(f.c.health(0).state(), RailState::Ramping) << f.c.health(0).reason();
  auto echo = [&](T at, uint64_t n) {
    TickInput in = f.quiet(at);
    in.rails[0].tcp.segs_out = 9 * n;
    in.rails[0].tcp.retrans_segs = n;
    in.rails[0].tcp.rto_events = n;
    in.rails[1].tcp.segs_out = 1000 * n;
    f.carry_out(f.c.tick(in));
  };
  echo(now + 50ms, 1);
  EXPECT_EQ(f.c.health(0).state(), RailState::Ramping)
      << "suspected on the outage's echo: " << f.c.health(0).reason();
  echo(now + 1600ms, 1);  // nothing new
  echo(now + 1650ms, 2);  // a ramp with evidence against it ends: back to the hold-down
  EXPECT_EQ(f.c.health(0).state(), RailState::Holddown) << f.c.health(0).reason();
  EXPECT_NE(f.c.health(0).reason().find("ramp aborted: data-path evidence"), std::string::npos)
      << f.c.health(0).reason();
}

TEST(Controller, TheFirstRailBackWithItsCarrierCarriesBeforeItsBfdSession) {
  Fixture f;
  for (size_t i : {0u, 1u}) f.c.bfd(i, bfd::State::Up, bfd::Diag::None, false, f.t);
  f.c.carrier(0, false, f.t + 1s);
  f.c.carrier(1, false, f.t + 1s);
  for (size_t i : {0u, 1u}) f.c.bfd(i, bfd::State::Down, bfd::Diag::TimeExpired, false, f.t + 2s);
  f.carry_out(f.c.settle(f.t + 2s));
  ASSERT_TRUE(f.c.all_down());
  // rail1's carrier is back; its BFD session a second later
  f.c.carrier(1, true, f.t + 3s);
  Plan carrier = f.c.settle(f.t + 3s);
  EXPECT_EQ(f.c.health(1).state(), RailState::Down) << "BFD has not said it forwards yet";
  auto* w = f.write_of(carrier, "expert-dispatch");
  ASSERT_NE(w, nullptr) << "nothing else carries: the rail with carrier is tried";
  EXPECT_EQ(w->shares, (Shares{0, kAll}));
  ASSERT_TRUE(carrier.route_around);
  EXPECT_EQ(*carrier.route_around, (std::vector<bool>{true, false}));
  f.carry_out(carrier);
  f.c.bfd(1, bfd::State::Up, bfd::Diag::None, false, f.t + 4s);
  f.carry_out(f.c.settle(f.t + 4s));
  EXPECT_EQ(f.c.health(1).state(), RailState::Up) << f.c.health(1).reason();
}

// The peer's daemon killed: its BFD sessions expire on every rail at once,
// while its traffic still arrives on the rail it uses. That rail is not
// failed (its forwarding is proven by the data); a rail with nothing
// arriving, or a session the peer says is down, still fails.
TEST(Controller, ABfdSessionThatExpiresWhileThePeersDataArrivesIsNotARailFailure) {
  Fixture f;
  for (size_t i : {0u, 1u}) f.c.bfd(i, bfd::State::Up, bfd::Diag::None, false, f.t);
  TickInput in = f.quiet(f.t);
  in.class_path_rx_bytes.assign(f.policy.classes.size(), std::vector<uint64_t>(2, 0));
  size_t ps = klass(f.policy, "param-sync");
  for (int k = 1; k <= 40; ++k) {  // 2 s of 20 Mbit/s arriving on rail1
    in.now = f.t + std::chrono::milliseconds(50 * k);
    in.class_path_rx_bytes[ps][1] += 125'000;
    f.carry_out(f.c.tick(in));
  }
  T t = in.now;
  f.c.bfd(1, bfd::State::Down, bfd::Diag::TimeExpired, false, t);
  Plan plan = f.c.settle(t);
  EXPECT_EQ(f.c.health(1).state(), RailState::Up) << f.c.health(1).reason();
  EXPECT_TRUE(has_event(plan, "the peer's BFD stopped, not the rail"));
  EXPECT_TRUE(plan.writes.empty()) << "nothing moves";
  f.c.bfd(0, bfd::State::Down, bfd::Diag::TimeExpired, false, t);
  f.carry_out(f.c.settle(t));
  EXPECT_EQ(f.c.health(0).state(), RailState::Down) << "nothing arrives there: BFD is all we have";
  // the peer's daemon restarted: its fresh session says Down first
  f.c.bfd(1, bfd::State::Up, bfd::Diag::None, false, t + 1s);
  f.c.bfd(1, bfd::State::Down, bfd::Diag::NeighborDown, false, t + 1500ms);
  f.carry_out(f.c.settle(t + 1500ms));
  EXPECT_EQ(f.c.health(1).state(), RailState::Up) << f.c.health(1).reason();
  // once nothing arrives any more, a session that goes down fails the rail
  for (int k = 1; k <= 40; ++k) {
    in.now = t + 2s + std::chrono::milliseconds(50 * k);
    f.carry_out(f.c.tick(in));
  }
  f.c.bfd(1, bfd::State::Up, bfd::Diag::None, false, in.now);
  f.c.bfd(1, bfd::State::Down, bfd::Diag::NeighborDown, false, in.now + 100ms);
  f.carry_out(f.c.settle(in.now + 100ms));
  EXPECT_EQ(f.c.health(1).state(), RailState::Down);
}

// A daemon killed in the middle of a failover: the next one is a new
// Controller that inherits the records the first left.
struct Restarted {
  Fixture before;
  Controller c;
  Restarted() {
    for (size_t i : {0u, 1u}) before.c.bfd(i, bfd::State::Up, bfd::Diag::None, false, before.t);
  }
  void restart(T now) {
    auto recs = before.c.records();
    c.set_policy(before.policy, {true, true}, before.c.routed_around_for(before.policy), {}, now);
    std::vector<std::optional<RailRecord>> in(recs.begin(), recs.end());
    c.inherit(in, now);
  }
  void carry_out(const Plan& plan) {
    for (auto& w : plan.writes) c.written(w);
    if (plan.route_around) c.routed(*plan.route_around);
  }
};

TEST(Controller, ARestartInheritsAFailedRailAndKeepsItFailedUntilBfdSaysItForwards) {
  Restarted r;
  auto& f = r.before;
  // rail0 blackholed: data-path evidence moved the classes off it
  f.carry_out(evidence_against_rail0(f));
  ASSERT_EQ(f.c.health(0).state(), RailState::Suspect);
  T t = f.t + 2s;
  r.restart(t);
  Plan first = r.c.settle(t);
  EXPECT_EQ(r.c.health(0).state(), RailState::Down) << r.c.health(0).reason();
  EXPECT_TRUE(has_event(first, "before the restart"));
  for (auto& w : first.writes)
    EXPECT_EQ(w.shares[0], 0) << f.policy.classes[w.klass].name << " is not moved onto rail0";
  r.carry_out(first);
  // no BFD session yet is no evidence that it forwards, for as long as it takes
  for (int ms = 100; ms <= 20000; ms += 100) {
    Plan p = r.c.tick(f.quiet(t + std::chrono::milliseconds(ms)));
    for (auto& w : p.writes) EXPECT_EQ(w.shares[0], 0) << f.policy.classes[w.klass].name;
    r.carry_out(p);
  }
  EXPECT_EQ(r.c.health(0).state(), RailState::Down);
  // the blackhole ends: BFD comes up, then the hold-down and the ramp
  r.c.bfd(1, bfd::State::Up, bfd::Diag::None, false, t + 20s);
  r.c.bfd(0, bfd::State::Up, bfd::Diag::None, false, t + 21s);
  r.carry_out(r.c.settle(t + 21s));
  EXPECT_EQ(r.c.health(0).state(), RailState::Holddown);
  for (int s = 22; s <= 45; ++s) r.carry_out(r.c.tick(f.quiet(t + std::chrono::seconds(s))));
  EXPECT_EQ(r.c.health(0).state(), RailState::Up) << r.c.health(0).reason();
  // every class is back where it was before the fault
  for (size_t c = 0; c < f.policy.classes.size(); ++c)
    EXPECT_EQ(r.c.written_shares(c), f.c.scheduler().classes[c].shares)
        << f.policy.classes[c].name << " has its way back";
}

TEST(Controller, ARestartWithoutBfdServesTheHolddownBeforeTheRamp) {
  Restarted r;
  auto& f = r.before;
  f.c.carrier(0, false, f.t);
  f.carry_out(f.c.settle(f.t));
  f.c.carrier(0, true, f.t + 1s);
  f.carry_out(f.c.settle(f.t + 1s));
  ASSERT_EQ(f.c.health(0).state(), RailState::Holddown);
  Policy p = f.policy;
  p.health.bfd = false;
  r.c.set_policy(p, {true, true}, {true, false}, {}, f.t + 2s);
  auto recs = f.c.records();
  std::vector<std::optional<RailRecord>> in(recs.begin(), recs.end());
  in[0]->key = rail_key_hash(p, 0);
  in[1]->key = rail_key_hash(p, 1);
  r.c.inherit(in, f.t + 2s);
  Plan first = r.c.settle(f.t + 2s);
  EXPECT_EQ(r.c.health(0).state(), RailState::Holddown) << r.c.health(0).reason();
  for (auto& w : first.writes) EXPECT_EQ(w.shares[0], 0);
  // a record of another rail (renamed, another interface) is not taken
  Controller other;
  Policy q = f.policy;
  q.paths[0].interface = "eth9";
  other.set_policy(q, {true, true}, {false, false}, {}, f.t + 2s);
  other.inherit(in, f.t + 2s);
  EXPECT_EQ(other.health(0).state(), RailState::Up);
}

TEST(Controller, AReloadKeepsEachClassesWayBackByName) {
  Fixture f;
  f.c.carrier(0, false, f.t);
  f.carry_out(f.c.settle(f.t));
  Policy next = f.policy;
  std::rotate(next.classes.begin(), next.classes.begin() + 1, next.classes.end());
  f.c.set_policy(next, {true, true}, f.c.routed_around_for(next), {}, f.t + 1s);
  f.carry_out(f.c.settle(f.t + 1s));
  f.c.carrier(0, true, f.t + 2s);
  f.carry_out(f.c.settle(f.t + 2s));
  for (int s = 3; s <= 30; ++s) f.carry_out(f.c.tick(f.quiet(f.t + std::chrono::seconds(s))));
  ASSERT_EQ(f.c.health(0).state(), RailState::Up);
  for (auto name : {"expert-dispatch", "expert-combine", "control"})
    EXPECT_EQ(f.c.written_shares(klass(next, name)), (Shares{kAll, 0})) << name;
}

TEST(Controller, DrainIsRefusedForTheLastPathCarryingTraffic) {
  Fixture f;
  ASSERT_TRUE(f.c.drain(1, true, f.t));
  Plan plan = f.c.settle(f.t);
  EXPECT_EQ(f.c.health(1).state(), RailState::Drained);
  auto* w = f.write_of(plan, "param-sync");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shares, (Shares{kAll, 0}));
  f.carry_out(plan);
  auto r = f.c.drain(0, true, f.t + 1s);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().what().find("only path carrying traffic"), std::string::npos);
  EXPECT_EQ(f.c.health(0).state(), RailState::Up) << "a refused drain changes nothing";
  ASSERT_TRUE(f.c.drain(1, false, f.t + 2s));
  EXPECT_EQ(f.c.health(1).state(), RailState::Ramping) << "undrain ramps, no hold-down";
}

TEST(Controller, AnOperatorPinIsWrittenWithItsFlagAndSurvivesAReload) {
  Fixture f;
  size_t ls = klass(f.policy, "logs");
  DecisionWrite w = f.c.place(ls, 0, true);
  EXPECT_EQ(w.shares, (Shares{kAll, 0}));
  EXPECT_EQ(w.flags, DP_DECISION_F_PINNED | kOperatorPinned);
  f.c.placed(ls, 0, true);
  EXPECT_TRUE(f.c.operator_pinned(ls));
  EXPECT_TRUE(f.c.settle(f.t).writes.empty()) << "what was placed is what the map holds";
  // a reload: the datapath reads the pin back from the decision map
  f.c.set_policy(f.policy, {true, true}, {false, false}, {{ls, 0}}, f.t + 1s);
  EXPECT_TRUE(f.c.operator_pinned(ls));
  Plan plan = f.c.settle(f.t + 1s);
  auto* again = f.write_of(plan, "logs");
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->shares, (Shares{kAll, 0}));
  EXPECT_EQ(again->flags, DP_DECISION_F_PINNED | kOperatorPinned)
      << "rewritten, still pinned (dpctl class list: pinned, by the operator)";
}

TEST(Controller, AReloadKeepsAFailedRailRoutedAroundAndItsHealth) {
  Fixture f;
  f.c.carrier(0, false, f.t);
  f.carry_out(f.c.settle(f.t));
  Policy next = f.policy;
  next.scheduler.cooldown = 300ms;  // a change that keeps the rails' keys
  auto around = f.c.routed_around_for(next);
  EXPECT_EQ(around, (std::vector<bool>{true, false}));
  f.c.set_policy(next, {true, true}, around, {}, f.t + 1s);
  EXPECT_EQ(f.c.health(0).state(), RailState::Down) << "the carrier input is for new rails only";
  Plan plan = f.c.settle(f.t + 1s);
  EXPECT_FALSE(plan.route_around) << "already routed around";
  for (auto& w : plan.writes) EXPECT_EQ(w.shares[0], 0) << next.classes[w.klass].name;
}

TEST(Controller, AWriteThatDidNotTakeEffectIsPlannedAgain) {
  Fixture f;
  f.c.carrier(0, false, f.t);
  Plan plan = f.c.settle(f.t);
  ASSERT_FALSE(plan.writes.empty());
  // the daemon's writes failed: it reported nothing back
  if (plan.route_around) f.c.routed(*plan.route_around);
  Plan again = f.c.settle(f.t + 1s);
  EXPECT_EQ(again.writes.size(), plan.writes.size());
}

TEST(Controller, TheAdaptiveSchedulerSpillsAnOverloadedElasticClassAndTheStaticOneDoesNot) {
  for (bool adaptive : {false, true}) {
    Fixture f(adaptive);
    size_t combine = klass(f.policy, "expert-combine");
    uint64_t tx = 0;
    bool spilled = false;
    for (int i = 1; i <= 40 && !spilled; ++i) {
      TickInput in = f.quiet(f.t + i * 50ms);
      in.rails[0].utilisation = in.rails[0].tick_utilisation = 0.95;  // rail0 full
      in.rails[1].utilisation = in.rails[1].tick_utilisation = 0.05;
      tx += 5'000'000;  // 800 Mbit/s of expert-combine
      in.class_tx_bytes[combine] = tx;
      Plan plan = f.c.tick(in);
      for (auto& e : plan.events)
        if (e.klass == "expert-combine" && e.kind == "spill") spilled = true;
      if (auto* w = f.write_of(plan, "expert-combine"); w && spilled) {
        EXPECT_GT(w->shares[1], 0) << "the spill is written";
        EXPECT_FALSE(w->event) << "a scheduler move is recorded as the scheduler's event";
      }
      f.carry_out(plan);
    }
    EXPECT_EQ(spilled, adaptive) << (adaptive ? "adaptive" : "static");
    EXPECT_EQ(f.c.scheduler().classes[combine].shares[1] > 0, adaptive);
  }
}

}  // namespace
}  // namespace dp

namespace dp {
namespace {

TEST(Controller, InTheSeparateTopologyAFailedRailsConnectionsAreEndedAfterTheDecisions) {
  auto load = load_policy_file(DP_POLICY_DIR "/lab-sep-a.toml");
  ASSERT_TRUE(load.ok());
  Controller c;
  T t{};
  c.set_policy(*load.policy, {true, true}, {false, false}, {}, t);
  for (auto& w : c.settle(t).writes) c.written(w);
  c.carrier(0, false, t + 1s);
  Plan plan = c.settle(t + 1s);
  EXPECT_EQ(plan.resets, (std::vector<Plan::Reset>{{0, false}}));
  EXPECT_FALSE(plan.writes.empty()) << "the decisions that place the reconnects come first";
  // a drain is maintenance: connections finish where they are
  Controller d;
  d.set_policy(*load.policy, {true, true}, {false, false}, {}, t);
  ASSERT_TRUE(d.drain(1, true, t + 1s));
  Plan drained = d.settle(t + 1s);
  EXPECT_EQ(d.health(1).state(), RailState::Drained);
  EXPECT_TRUE(drained.resets.empty());
}

// The classes that leave a suspect rail (health.suspect_moves: all by
// default, or the latency-sensitive ones) have their connections there ended.
TEST(Controller, InTheSeparateTopologyASuspectRailsConnectionsOfTheClassesThatLeaveItAreEnded) {
  for (bool elastic_too : {true, false}) {
    auto load = load_policy_file(DP_POLICY_DIR "/lab-sep-a.toml");
    ASSERT_TRUE(load.ok());
    load.policy->health.suspect_moves_elastic = elastic_too;
    Controller c;
    T t{};
    c.set_policy(*load.policy, {true, true}, {false, false}, {}, t);
    TickInput in;
    in.now = t + 1s;
    in.rails.resize(2);
    in.class_tx_bytes.assign(load.policy->classes.size(), 0);
    (void)c.tick(in);
    in.now += 50ms;
    in.rails[0].tcp.segs_out = 100;
    in.rails[0].tcp.retrans_segs = 50;
    in.rails[0].tcp.rto_events = 2;
    Plan plan = c.tick(in);
    EXPECT_EQ(c.health(0).state(), RailState::Suspect);
    EXPECT_EQ(plan.resets, (std::vector<Plan::Reset>{{0, !elastic_too, true}}));
  }
}

TEST(Controller, InTheSharedTopologyNothingIsEnded) {
  Fixture f;
  f.c.carrier(0, false, f.t + 1s);
  EXPECT_TRUE(f.c.settle(f.t + 1s).resets.empty()) << "flows move instead";
}

}  // namespace
}  // namespace dp

namespace dp {
namespace {

TEST(Controller, InTheSeparateTopologyNewConnectionsLeanTowardTheRailShortOfItsShareOfBytes) {
  Policy p = lab_policy(false, "lab-sep-a.toml");
  p.health.ramp_interval = 20s;  // the 10% step lasts the whole test
  Controller c;
  T t{};
  c.set_policy(p, {true, true}, {false, false}, {}, t);
  for (auto& w : c.settle(t).writes) c.written(w);
  size_t combine = static_cast<size_t>(p.class_index("expert-combine"));
  // rail0 fails and comes back: it ramps at 10% of expert-combine
  c.carrier(0, false, t);
  for (auto& w : c.settle(t).writes) c.written(w);
  c.carrier(0, true, t + 1s);
  for (auto& w : c.settle(t + 1s).writes) c.written(w);
  TickInput in;
  in.rails.resize(2);
  in.class_tx_bytes.assign(p.classes.size(), 0);
  in.class_path_tx_bytes.assign(p.classes.size(), {0, 0});
  auto run = [&](T from, int ticks, uint64_t per_tick0, uint64_t per_tick1) {
    Shares last;
    for (int i = 0; i < ticks; ++i) {
      in.now = from + i * 50ms;
      in.class_path_tx_bytes[combine][0] += per_tick0;
      in.class_path_tx_bytes[combine][1] += per_tick1;
      Plan plan = c.tick(in);
      for (auto& w : plan.writes) {
        if (w.klass == combine && w.health_shares == Shares{1000, 9000} && !last.empty()) {
          EXPECT_FALSE(w.event) << "a placement by bytes is not a move by health";
        }
        if (w.klass == combine) last = w.shares;
        c.written(w);
      }
    }
    return last;
  };
  // every byte so far went to rail1 (its connections were made before)
  Shares lean = run(t + 12s, 40, 0, 1'000'000);
  ASSERT_EQ(c.health(0).state(), RailState::Ramping);
  ASSERT_FALSE(lean.empty());
  EXPECT_EQ(lean, (Shares{2000, 8000})) << "new connections lean toward rail0";
  // the bytes come to match the shares: placement by count again
  Shares back = run(t + 14s, 200, 100'000, 900'000);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_NEAR(back[0], 1000, 200) << "within the 2% that is not worth a write";
}

// The cell (or burst) settings a tick plans reach the plan the daemon
// carries out. (They were once planned and dropped: the datapath never saw a
// cell, and the lab's "cells" figures measured flowlets.)
TEST(Controller, ATickCarriesTheCellAndBurstSettingsToTheDatapath) {
  for (bool bursts : {false, true}) {
    SCOPED_TRACE(bursts ? "bursts" : "cells");
    Fixture f(true);
    f.policy.scheduler.flowcell = bursts ? 0 : kDefaultFlowcell;
    f.policy.scheduler.burst_placement = bursts;
    f.c.set_policy(f.policy, {true, true}, {false, false}, {}, f.t);
    f.carry_out(f.c.settle(f.t));
    Plan plan = f.c.tick(f.quiet(f.t + 50ms));
    ASSERT_TRUE(plan.cells.has_value());
    EXPECT_EQ(plan.cells->bursts, bursts);
    EXPECT_EQ(plan.cells->shift, bursts ? 0u : 14u);
    EXPECT_TRUE(plan.cells->classes[klass(f.policy, "expert-combine")]) << "elastic";
    EXPECT_FALSE(plan.cells->classes[klass(f.policy, "control")]) << "latency-sensitive";
    ASSERT_EQ(plan.cells->ns_per_kib.size(), 2u);
    EXPECT_EQ(plan.cells->ns_per_kib[0], 8192u) << "1 Gbit idle: 8.192 us a KiB";
    ASSERT_TRUE(f.c.cells().has_value());
    EXPECT_EQ(*f.c.cells(), *plan.cells);
    EXPECT_FALSE(f.c.tick(f.quiet(f.t + 100ms)).cells) << "unchanged: not written again";
  }
}

}  // namespace
}  // namespace dp

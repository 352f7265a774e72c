// SPDX-License-Identifier: Apache-2.0
// Replay tests: traces of estimates (tests/scheduler/*.json) fed through the
// scheduler with expected decisions, and invariants checked at every step:
// shares sum to the whole, a down rail gets nothing, pinned classes are never
// touched, and no class moves twice within a cooldown (except off a down rail).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "dualpath/abi.h"
#include "dualpath/core/controller.h"
#include "dualpath/core/scheduler.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace {

struct Replay {
  dp::Policy policy;
  dp::SchedulerState state;
  dp::SchedClock::time_point t0 = dp::SchedClock::time_point(std::chrono::hours(1));
  std::map<std::string, dp::SchedClock::time_point> last_move;
  std::vector<std::string> pinned;
  std::string name;

  void step(const json& s) {
    dp::SchedulerInput in;
    in.now = t0 + std::chrono::milliseconds(s.value("t_ms", 0));
    for (auto& r : s["rails"]) {
      dp::RailInput ri;
      ri.healthy = r.value("healthy", true);
      ri.utilisation = r.value("util", 0.0);
      if (r.contains("rtt_us")) ri.rtt_us = r["rtt_us"].get<double>();
      in.rails.push_back(ri);
    }
    for (auto& c : policy.classes) {
      double mbps = s.contains("demand_mbps") ? s["demand_mbps"].value(c.name, 0.0) : 0.0;
      in.demand_bps.push_back(mbps * 1e6);
      in.operator_pinned.push_back(false);
    }
    auto before = state;
    auto r = dp::schedule(policy, in, state);
    state = r.state;
    std::string where = name + " at t=" + std::to_string(s.value("t_ms", 0)) + " ms";

    // invariants
    bool any_up = std::any_of(in.rails.begin(), in.rails.end(), [](auto& x) { return x.healthy; });
    for (size_t c = 0; c < policy.classes.size(); ++c) {
      const auto& cls = policy.classes[c];
      const auto& sh = state.classes[c].shares;
      int sum = 0;
      for (auto v : sh) sum += v;
      EXPECT_EQ(sum, DP_SHARE_SCALE) << where << ": shares of " << cls.name << " sum to the whole";
      if (cls.pinned) {
        EXPECT_EQ(sh, dp::initial_state(policy).classes[c].shares)
            << where << ": pinned " << cls.name;
        continue;
      }
      if (!any_up) continue;
      for (size_t rail = 0; rail < sh.size(); ++rail) {
        if (!in.rails[rail].healthy) {
          EXPECT_EQ(sh[rail], 0) << where << ": " << cls.name << " on down rail";
        }
      }
    }
    for (auto& e : r.events) {
      EXPECT_FALSE(e.reason.empty()) << where;
      if (e.kind != "down" && last_move.count(e.klass)) {
        EXPECT_GE(in.now - last_move[e.klass], policy.scheduler.cooldown)
            << where << ": " << e.klass << " moved twice within the cooldown";
      }
      last_move[e.klass] = in.now;
    }

    // expectations
    if (s.contains("expect"))
      for (auto& [cls, rails] : s["expect"].items()) {
        int ci = -1;
        for (size_t c = 0; c < policy.classes.size(); ++c)
          if (policy.classes[c].name == cls) ci = static_cast<int>(c);
        ASSERT_GE(ci, 0) << where << ": unknown class " << cls;
        const auto& sh = state.classes[static_cast<size_t>(ci)].shares;
        for (size_t rail = 0; rail < policy.paths.size(); ++rail) {
          double want = rails.value(policy.paths[rail].name, 0.0);
          EXPECT_NEAR(sh[rail] / 100.0, want, 0.05)
              << where << ": " << cls << " on " << policy.paths[rail].name << " ("
              << dp::format_shares(policy, sh) << ")";
        }
      }
    if (s.contains("expect_no_kinds")) {
      for (auto& e : r.events) {
        for (auto& k : s["expect_no_kinds"]) {
          EXPECT_NE(e.kind, k.get<std::string>()) << where << ": " << e.reason;
        }
      }
    }
    if (s.contains("expect_kinds")) {
      std::vector<std::string> kinds;
      for (auto& e : r.events) kinds.push_back(e.kind);
      EXPECT_EQ(kinds, s["expect_kinds"].get<std::vector<std::string>>()) << where;
    }
  }
};

std::vector<std::string> traces() {
  std::vector<std::string> out;
  for (auto& e : fs::directory_iterator(std::string(DP_SOURCE_DIR) + "/tests/scheduler"))
    if (e.path().extension() == ".json") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

class SchedulerReplay : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(SchedulerReplay, Trace) {
  std::ifstream in(std::string(DP_SOURCE_DIR) + "/tests/scheduler/" + GetParam() + ".json");
  json trace = json::parse(in);
  auto load = dp::load_policy_file(std::string(DP_SOURCE_DIR) + "/policies/" +
                                   trace["policy"].get<std::string>());
  ASSERT_TRUE(load.ok());
  Replay r;
  r.name = GetParam();
  r.policy = *load.policy;
  // The traces replay the scheduler's rules, not the policy's defaults:
  // "flowcell": 0 places classes without cells; "placement": "bursts" (else
  // flowlets); "peak_window_ms" and "hold_ms": decisions on peaks (else 0:
  // on the smoothed rates the trace gives); "return_margin" as the policy's.
  if (trace.contains("flowcell")) r.policy.scheduler.flowcell = trace["flowcell"].get<uint64_t>();
  r.policy.scheduler.burst_placement = trace.value("placement", "flowlets") == "bursts";
  r.policy.scheduler.peak_window = std::chrono::milliseconds(trace.value("peak_window_ms", 0));
  r.policy.scheduler.hold = std::chrono::milliseconds(trace.value("hold_ms", 0));
  if (trace.contains("return_margin"))
    r.policy.scheduler.return_margin = trace["return_margin"].get<double>();
  for (auto& name : trace.value("pin", std::vector<std::string>{}))
    for (auto& c : r.policy.classes)
      if (c.name == name) c.pinned = true;
  r.state = dp::initial_state(r.policy);
  if (trace.contains("noise")) {
    // random RTTs inside the given ranges; the expectation holds at every tick
    const json& n = trace["noise"];
    std::mt19937 rng(n.value("seed", 1));
    auto range = [&](const char* k) {
      return std::uniform_real_distribution<double>(n[k][0].get<double>(), n[k][1].get<double>());
    };
    auto a = range("rail0_rtt_us"), b = range("rail1_rtt_us");
    for (int i = 0; i < n["steps"].get<int>(); ++i)
      r.step({{"t_ms", i * n["period_ms"].get<int>()},
              {"rails", {{{"util", 0.2}, {"rtt_us", a(rng)}}, {{"util", 0.1}, {"rtt_us", b(rng)}}}},
              {"expect", n["expect"]},
              {"expect_kinds", json::array()}});
  }
  for (auto& s : trace["steps"]) r.step(s);
}

INSTANTIATE_TEST_SUITE_P(Traces, SchedulerReplay, ::testing::ValuesIn(traces()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(Scheduler, NoDemandNoMoveAndOutputIsDeterministic) {
  auto load = dp::load_policy_file(std::string(DP_SOURCE_DIR) + "/policies/lab-a.toml");
  ASSERT_TRUE(load.ok());
  const auto& p = *load.policy;
  dp::SchedulerInput in;
  in.now = dp::SchedClock::time_point(std::chrono::hours(2));
  in.rails = {{true, 0.95, 100.0}, {true, 0.10, 120.0}};
  in.demand_bps.assign(p.classes.size(), 0);
  auto a = dp::schedule(p, in, dp::initial_state(p));
  EXPECT_TRUE(a.events.empty()) << "a hot rail with no demand from a class does not move it";
  in.demand_bps.assign(p.classes.size(), 300e6);
  auto b = dp::schedule(p, in, dp::initial_state(p));
  auto c = dp::schedule(p, in, dp::initial_state(p));
  ASSERT_EQ(b.events.size(), c.events.size());
  for (size_t i = 0; i < b.events.size(); ++i) {
    EXPECT_EQ(b.events[i].after, c.events[i].after);
    EXPECT_EQ(b.events[i].reason, c.events[i].reason);
  }
  ASSERT_FALSE(b.events.empty());
  // (decisions on the peaks of 100 ms by default)
  EXPECT_NE(b.events[0].reason.find("rail0 utilisation peaked at 0.95 in the last 100ms > "
                                    "threshold 0.60: expert-combine spills"),
            std::string::npos)
      << b.events[0].reason;
}

TEST(FlowletGap, GrowsToTheRailsRttDifferenceWithinItsCap) {
  using namespace std::chrono_literals;
  using dp::effective_flowlet_gap;
  EXPECT_EQ(effective_flowlet_gap(500us, {40.0, 60.0}), 500us) << "equal rails: the policy's gap";
  EXPECT_EQ(effective_flowlet_gap(500us, {1800.0, 60.0}), 1740us) << "a standing queue on one";
  EXPECT_EQ(effective_flowlet_gap(500us, {50000.0, 60.0}), dp::kMaxFlowletGap);
  EXPECT_EQ(effective_flowlet_gap(500us, {1800.0, std::nullopt}), 500us)
      << "one RTT is not a difference";
  EXPECT_EQ(effective_flowlet_gap(0us, {1800.0, 60.0}), 0us) << "flowlets off stay off";
}

TEST(PeakWindow, ThePeakOfAWindowAndNothingOlder) {
  using namespace std::chrono_literals;
  dp::PeakWindow w;
  auto t0 = dp::SchedClock::time_point(std::chrono::hours(3));
  w.add(t0, 0.9, 1s);
  w.add(t0 + 50ms, 0.2, 1s);
  w.add(t0 + 100ms, 0.4, 1s);
  EXPECT_DOUBLE_EQ(w.peak(t0 + 100ms, 200ms), 0.9);
  EXPECT_DOUBLE_EQ(w.peak(t0 + 100ms, 100ms), 0.4) << "0.9 is older than the window";
  EXPECT_DOUBLE_EQ(w.peak(t0 + 100ms, 10ms), 0.4);
  EXPECT_DOUBLE_EQ(w.peak(t0 + 2s, 1s), 0.0) << "nothing in the window";
  w.add(t0 + 2s, 0.1, 1s);
  EXPECT_DOUBLE_EQ(w.peak(t0 + 2s, 10s), 0.1) << "samples older than keep are forgotten";
}

TEST(Cells, ElasticClassesOfTheSharedTopologyByTheCapacityOtherTrafficLeaves) {
  auto load = dp::load_policy_file(std::string(DP_SOURCE_DIR) + "/policies/lab-a.toml");
  ASSERT_TRUE(load.ok());
  dp::Policy p = *load.policy;
  EXPECT_EQ(dp::plan_cells(p, {0, 0}).shift, 0u) << "bursts by default, not cells";
  EXPECT_TRUE(dp::plan_cells(p, {0, 0}).bursts);
  p.scheduler.adaptive = false;
  EXPECT_FALSE(dp::plan_cells(p, {0, 0}).bursts) << "static mode never splits a class";
  p.scheduler.adaptive = true;
  p.scheduler.burst_placement = false;  // placement = "cells"
  p.scheduler.flowcell = 16 * 1024;
  auto c = dp::plan_cells(p, {0, 0});
  EXPECT_EQ(c.shift, 14u) << "16KiB";
  for (size_t i = 0; i < p.classes.size(); ++i)
    EXPECT_EQ(c.classes[i], p.classes[i].kind == dp::ClassKind::Elastic) << p.classes[i].name;
  EXPECT_EQ(c.ns_per_kib, (std::vector<uint32_t>{8192, 32768})) << "1 Gbit and 250 Mbit";
  c = dp::plan_cells(p, {500e6, 0});
  EXPECT_EQ(c.ns_per_kib[0], 16384u) << "half of rail0 is used by others";
  c = dp::plan_cells(p, {2e9, 0});
  EXPECT_EQ(c.ns_per_kib[0], 163840u) << "never less than a twentieth of the capacity";
  p.scheduler.flowcell = 0;
  EXPECT_EQ(dp::plan_cells(p, {0, 0}).shift, 0u) << "flowcell = 0: off";
  p.scheduler.flowcell = 1 << 16;
  p.topology = dp::Topology::Separate;
  EXPECT_EQ(dp::plan_cells(p, {0, 0}).shift, 0u) << "the separate topology places connections";
}

// SPDX-License-Identifier: Apache-2.0
// What the NCCL plugins report (core/nccl_reports.cpp): running totals into
// counters that only grow, and a budget of moves per process.
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "dualpath/core/nccl_reports.h"

namespace dp {
namespace {

using namespace std::chrono_literals;

TEST(NcclReports, RunningTotalsOfEachProcessAddUp) {
  NcclReports r;
  const auto t0 = NcclReports::Clock::now();
  r.report(100, "python3", {{"expert-dispatch", "rail0", 1000}, {"expert-dispatch", "rail1", 10}},
           t0);
  r.report(200, "python3", {{"expert-dispatch", "rail0", 500}}, t0);
  r.report(100, "python3", {{"expert-dispatch", "rail0", 3000}, {"expert-dispatch", "rail1", 10}},
           t0 + 1s);
  EXPECT_EQ(r.bytes("expert-dispatch", "rail0"), 3500u) << "each process's total counted once";
  EXPECT_EQ(r.bytes("expert-dispatch", "rail1"), 10u);
  EXPECT_EQ(r.bytes("param-sync", "rail0"), 0u);
  EXPECT_EQ(r.reporting(t0 + 1s), 2u);
  EXPECT_EQ(r.reporting(t0 + 1s + NcclReports::kQuiet + 1s), 0u) << "both went quiet";
  EXPECT_EQ(r.bytes("expert-dispatch", "rail0"), 3500u) << "their bytes stay counted";
}

// dpctl flow list: each process still reporting, its totals and the rate of
// its last interval, and whether its bytes are the scheduler's
TEST(NcclReports, EachReportingProcessIsListedWithItsTotalsAndLastRate) {
  NcclReports r;
  const auto t0 = NcclReports::Clock::now();
  r.report(100, "python3", {{"expert-combine", "rail0", 1000}}, t0);
  r.report(200, "torchrun", {{"param-sync", "rail1", 50}}, t0, false);
  r.report(100, "python3", {{"expert-combine", "rail0", 3000}, {"expert-combine", "rail1", 400}},
           t0 + 200ms);
  auto v = r.processes(t0 + 300ms);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].pid, 100);
  EXPECT_EQ(v[0].name, "python3");
  EXPECT_TRUE(v[0].scheduled);
  EXPECT_NEAR(v[0].since.count(), 0.1, 1e-6);
  ASSERT_EQ(v[0].sent.size(), 2u);
  EXPECT_EQ(v[0].sent[0].klass, "expert-combine");
  EXPECT_EQ(v[0].sent[0].path, "rail0");
  EXPECT_EQ(v[0].sent[0].bytes, 3000u);
  EXPECT_NEAR(v[0].sent[0].bytes_per_s.value_or(-1), 10000, 1e-6) << "2000 bytes in 200 ms";
  EXPECT_EQ(v[0].sent[1].bytes, 400u);
  EXPECT_NEAR(v[0].sent[1].bytes_per_s.value_or(-1), 2000, 1e-6) << "from 0 before";
  EXPECT_EQ(v[1].pid, 200);
  EXPECT_FALSE(v[1].scheduled) << "its sockets unmarked: the datapath counts them";
  EXPECT_FALSE(v[1].sent[0].bytes_per_s) << "one report: no interval yet (dpctl: -, not 0)";
  EXPECT_TRUE(r.processes(t0 + 1s + NcclReports::kQuiet).empty()) << "both went quiet";
}

TEST(NcclReports, ATotalThatFallsIsANewProcessAndTheCountersStillOnlyGrow) {
  NcclReports r;
  const auto t0 = NcclReports::Clock::now();
  r.report(100, "python3", {{"kv-transfer", "rail1", 5000}}, t0);
  // the pid reused by a new process whose plugin starts from 0
  r.report(100, "python3", {{"kv-transfer", "rail1", 700}}, t0 + 1s);
  EXPECT_EQ(r.bytes("kv-transfer", "rail1"), 5700u);
  // another program under the same pid: a new count too
  r.report(100, "vllm", {{"kv-transfer", "rail1", 800}}, t0 + 2s);
  EXPECT_EQ(r.bytes("kv-transfer", "rail1"), 6500u);
}

TEST(NcclReports, AProcessPastTheLimitForgetsTheQuietestButKeepsItsBytes) {
  NcclReports r;
  const auto t0 = NcclReports::Clock::now();
  for (pid_t p = 1; p <= static_cast<pid_t>(NcclReports::kMaxProcesses) + 1; ++p)
    r.report(p, "x", {{"logs", "rail0", 1}}, t0 + std::chrono::milliseconds(p));
  EXPECT_EQ(r.bytes("logs", "rail0"), NcclReports::kMaxProcesses + 1);
  EXPECT_EQ(r.reporting(t0 + 1s), NcclReports::kMaxProcesses);
  // pid 1 was forgotten: its next report counts from nothing
  r.report(1, "x", {{"logs", "rail0", 1}}, t0 + 2s);
  EXPECT_EQ(r.bytes("logs", "rail0"), NcclReports::kMaxProcesses + 2);
}

// The scheduler reads a class's demand per tick: a report every 200 ms of
// what was sent at a steady 1 MB/s reads as 50 KB a 50-ms tick, not as
// one tick of 200 KB and three of nothing.
TEST(NcclReports, ReportsEveryFewTicksReadAsTheSteadyRateTheyWereSentAt) {
  NcclReports r;
  const auto t0 = NcclReports::Clock::now();
  uint64_t sent = 0, before = 0;
  std::vector<uint64_t> per_tick;
  for (int tick = 1; tick <= 40; ++tick) {
    auto now = t0 + tick * 50ms;
    if (tick % 4 == 0) {
      sent += 200'000;
      r.report(42, "python3", {{"expert-combine", "rail0", sent}}, now);
    }
    r.advance(now);
    uint64_t p = r.paced("expert-combine", "rail0");
    ASSERT_LE(p, r.bytes("expert-combine", "rail0")) << "never ahead of what was reported";
    ASSERT_GE(p, before) << "cumulative";
    per_tick.push_back(p - before);
    before = p;
  }
  // from the third report on (the first is paced over kPaceMax: its
  // interval is not known), every tick carries about a quarter of a report
  for (size_t i = 12; i < per_tick.size(); ++i) {
    EXPECT_GE(per_tick[i], 40'000u) << "tick " << i;
    EXPECT_LE(per_tick[i], 60'000u) << "tick " << i;
  }
  // the process stops: what it reported is all released within kPaceMax
  r.advance(t0 + 40 * 50ms + NcclReports::kPaceMax);
  EXPECT_EQ(r.paced("expert-combine", "rail0"), r.bytes("expert-combine", "rail0"));
  EXPECT_EQ(r.paced("param-sync", "rail0"), 0u);
}

TEST(NcclReports, MovesAreAdmittedInABurstThenAtASteadyRate) {
  NcclReports r;
  const auto t0 = NcclReports::Clock::now();
  EXPECT_EQ(r.admit_events(7, 100, t0), NcclReports::kEventBurst);
  EXPECT_EQ(r.admit_events(7, 5, t0 + 1s), 0) << "less than one interval later";
  EXPECT_EQ(r.admit_events(7, 5, t0 + 3 * NcclReports::kEventEvery), 3);
  EXPECT_EQ(r.admit_events(8, 2, t0), 2) << "another process has a budget of its own";
  EXPECT_EQ(r.admit_events(8, 0, t0), 0);
}

}  // namespace
}  // namespace dp

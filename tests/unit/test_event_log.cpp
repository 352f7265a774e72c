// SPDX-License-Identifier: Apache-2.0
// dpctl events' memory: the newest events, as many as the policy keeps.
#include <gtest/gtest.h>

#include "dualpath/core/event_log.h"

namespace {

dp::SchedulerEvent event(int i) {
  dp::SchedulerEvent e;
  e.kind = "health";
  e.reason = "event " + std::to_string(i);
  return e;
}

std::vector<uint64_t> seqs(const dp::EventLog& log, uint64_t since = 0) {
  std::vector<uint64_t> out;
  const dp::json shown = log.render(dp::Policy{}, since);
  for (const auto& e : shown["events"]) out.push_back(e["seq"]);
  return out;
}

TEST(EventLog, KeepsTheNewestAsManyAsThePolicySays) {
  dp::EventLog log;
  EXPECT_EQ(log.keep(), 1024u) << "the policy's default";
  log.set_keep(16);
  for (int i = 1; i <= 40; ++i) log.record(event(i));
  auto kept = seqs(log);
  ASSERT_EQ(kept.size(), 16u);
  EXPECT_EQ(kept.front(), 25u);
  EXPECT_EQ(kept.back(), 40u);
  EXPECT_EQ(log.last(), 40u) << "numbers go on past what is dropped";
  EXPECT_EQ(seqs(log, 38), (std::vector<uint64_t>{39, 40}));
}

TEST(EventLog, ASmallerKeepDropsTheOldestAtOnceAndALargerOneKeepsWhatIsThere) {
  dp::EventLog log;
  for (int i = 1; i <= 100; ++i) log.record(event(i));
  log.set_keep(20);
  EXPECT_EQ(seqs(log).size(), 20u);
  EXPECT_EQ(seqs(log).front(), 81u);
  log.set_keep(4096);
  EXPECT_EQ(seqs(log).size(), 20u);
  for (int i = 101; i <= 200; ++i) log.record(event(i));
  EXPECT_EQ(seqs(log).size(), 120u);
}

TEST(EventLog, OneClasssNewestEventsOldestFirst) {
  dp::EventLog log;
  for (int i = 1; i <= 30; ++i) {
    dp::SchedulerEvent e = event(i);
    e.klass = i % 3 ? "other" : "mine";
    e.kind = "spill";
    log.record(e);
  }
  dp::Policy p;
  auto mine = log.newest_of(p, "mine", 4);
  ASSERT_EQ(mine.size(), 4u);
  EXPECT_EQ(mine.front()["seq"], 21u);
  EXPECT_EQ(mine.back()["seq"], 30u);
  for (const auto& e : mine) EXPECT_EQ(e["class"], "mine");
  EXPECT_EQ(log.newest_of(p, "mine", 100).size(), 10u);
  EXPECT_TRUE(log.newest_of(p, "none", 10).empty());
}

}  // namespace

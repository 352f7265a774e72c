// SPDX-License-Identifier: Apache-2.0
// The semantic policy diff: what an operator changed, key by key.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "dualpath/core/policy_diff.h"

namespace {

std::string read(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

std::vector<std::string> lines(const std::string& a, const std::string& b) {
  auto d = dp::diff_policies(a, "running", b, "new.toml");
  EXPECT_TRUE(d.ok()) << (d ? "" : d.error().what());
  std::vector<std::string> out;
  if (d)
    for (auto& c : *d) out.push_back(c.str());
  return out;
}

const std::string kLab = read(std::string(DP_POLICY_DIR) + "/lab-a.toml");

TEST(PolicyDiff, TheSameFileHasNoChangesEvenReformattedOrReordered) {
  EXPECT_TRUE(lines(kLab, kLab).empty());
  // comments, spacing and the order of the [[class]] entries are no change
  std::string moved = replace(kLab, "load_threshold = 0.60", "load_threshold=0.6   # hot");
  auto at = moved.find("[[class]]\nname = \"logs\"");
  ASSERT_NE(at, std::string::npos);
  std::string logs = moved.substr(at);
  moved = moved.substr(0, at);
  auto first = moved.find("[[class]]");
  moved.insert(first, logs + "\n");
  EXPECT_TRUE(lines(kLab, moved).empty()) << ::testing::PrintToString(lines(kLab, moved));
}

TEST(PolicyDiff, ChangedAddedAndRemovedKeysAndEntriesWithTheirLines) {
  std::string b = replace(kLab, "load_threshold = 0.60", "load_threshold = 0.70");
  b = replace(b,
              "name = \"param-sync\"\nkind = \"elastic\"\nrto_max = \"1s\"\npriority = 3\n"
              "prefer = \"rail1\"",
              "name = \"param-sync\"\nkind = \"elastic\"\nrto_max = \"1s\"\npriority = 3\n"
              "prefer = \"rail0\"");
  b = replace(b, "window = \"2s\"", "");  // not the default (10s): a change
  b += "\n[[class]]\nname = \"kv-cache\"\nkind = \"elastic\"\nprefer = \"rail1\"\n"
       "ports = [\"tcp:55000-55999\"]\n";
  auto at = b.find("[[class]]\nname = \"logs\"");
  auto end = b.find("[[class]]", at + 1);
  b.erase(at, end - at);
  auto d = dp::diff_policies(kLab, "running", b, "new.toml");
  ASSERT_TRUE(d.ok());
  std::vector<std::string> got;
  for (auto& c : *d) got.push_back(c.str());
  EXPECT_EQ(
      got, (std::vector<std::string>{
               "~ scheduler.load_threshold: 0.6 -> 0.7",
               "- measurement.window: '2s'",
               "~ class \"param-sync\".prefer: 'rail1' -> 'rail0'",
               "+ class \"kv-cache\": { name = 'kv-cache', kind = 'elastic', prefer = "
               "'rail1', ports = ['tcp:55000-55999'] }",
               "- class \"logs\": { name = 'logs', kind = 'elastic', rto_max = '1s', priority = 1, "
               "prefer = "
               "'rail1', dscp = 'CS1', mark = 0x54, ports = ['tcp:54000-54099', "
               "'udp:54000-54099'] }",
           }));
  auto line_in = [](const std::string& text, const std::string& what) {
    auto pre = text.substr(0, text.find(what));
    return 1 + static_cast<int>(std::count(pre.begin(), pre.end(), '\n'));
  };
  EXPECT_EQ((*d)[0].line, line_in(b, "load_threshold = 0.70"));
  EXPECT_EQ((*d)[1].line, line_in(kLab, "window = \"2s\"")) << "a removal: the old file's line";
  EXPECT_EQ((*d)[2].line, line_in(b, "prefer = \"rail0\"\ndscp = \"AF11\""));
  EXPECT_EQ(d->front().kind, dp::PolicyChange::Kind::Changed);
  EXPECT_EQ(std::string(dp::to_string(d->back().kind)), "removed");
}

// Issue 14: values, not their spelling.
TEST(PolicyDiff, AnotherSpellingOfTheSameValueOrAWrittenOutDefaultIsNoChange) {
  std::string same = replace(kLab, "fwmark = 0x100", "fwmark = 256");
  same = replace(same, "dead_zone = \"0.2ms\"", "dead_zone = \"200us\"");
  same = replace(same, "dscp = \"EF\"", "dscp = 46");
  same = replace(same, "capacity = \"1Gbit\"", "capacity = \"1000Mbit\"");
  same = replace(same, "gateway6 = \"fd98:0::2\"", "gateway6 = \"fd98::2\"");
  same = replace(same, "multiplier = 3\n", "multiplier = 3\nramp_interval = \"30s\"\n");
  same = replace(same, "[[path]]", "[responder]\nenable = true\n\n[[path]]");
  auto d = lines(kLab, same);
  EXPECT_TRUE(d.empty()) << [&] {
    std::string all;
    for (auto& l : d) all += l + "\n";
    return all;
  }();
  // and a real change beside them is still one
  auto real = lines(kLab, replace(same, "multiplier = 3", "multiplier = 4"));
  ASSERT_EQ(real.size(), 1u);
  EXPECT_EQ(real[0], "~ health.multiplier: 3 -> 4");
  // a default written out that differs from the default is a change
  auto other =
      lines(kLab, replace(kLab, "multiplier = 3\n", "multiplier = 3\nramp_interval = \"10s\"\n"));
  ASSERT_EQ(other.size(), 1u);
  EXPECT_EQ(other[0], "+ health.ramp_interval: '10s'");
  // and taking out a key whose value was the default is no change either
  EXPECT_TRUE(lines(kLab, replace(kLab, "holddown = \"5m\"\n", "")).empty());
}

TEST(PolicyDiff, ANonTomlFileIsAnErrorWithItsPosition) {
  auto d = dp::diff_policies(kLab, "running", "[node\nname = 1\n", "bad.toml");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().what().find("bad.toml:1:"), std::string::npos) << d.error().what();
}

}  // namespace

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
  b = replace(b, "name = \"param-sync\"\nkind = \"elastic\"\npriority = 3\nprefer = \"rail1\"",
              "name = \"param-sync\"\nkind = \"elastic\"\npriority = 3\nprefer = \"rail0\"");
  b = replace(b, "holddown = \"5m\"\n", "");
  b += "\n[[class]]\nname = \"kv-cache\"\nkind = \"elastic\"\nprefer = \"rail1\"\n"
       "ports = [\"tcp:55000-55999\"]\n";
  auto at = b.find("[[class]]\nname = \"logs\"");
  auto end = b.find("[[class]]", at + 1);
  b.erase(at, end - at);
  auto d = dp::diff_policies(kLab, "running", b, "new.toml");
  ASSERT_TRUE(d.ok());
  std::vector<std::string> got;
  for (auto& c : *d) got.push_back(c.str());
  EXPECT_EQ(got, (std::vector<std::string>{
                     "~ scheduler.load_threshold: 0.6 -> 0.7",
                     "- health.holddown: '5m'",
                     "~ class \"param-sync\".prefer: 'rail1' -> 'rail0'",
                     "+ class \"kv-cache\": { name = 'kv-cache', kind = 'elastic', prefer = "
                     "'rail1', ports = ['tcp:55000-55999'] }",
                     "- class \"logs\": { name = 'logs', kind = 'elastic', priority = 1, prefer = "
                     "'rail1', dscp = 'CS1', mark = 0x54, ports = ['tcp:54000-54099', "
                     "'udp:54000-54099'] }",
                 }));
  auto line_in = [](const std::string& text, const std::string& what) {
    auto pre = text.substr(0, text.find(what));
    return 1 + static_cast<int>(std::count(pre.begin(), pre.end(), '\n'));
  };
  EXPECT_EQ((*d)[0].line, line_in(b, "load_threshold = 0.70"));
  EXPECT_EQ((*d)[1].line, line_in(kLab, "holddown = \"5m\"")) << "a removal: the old file's line";
  EXPECT_EQ((*d)[2].line, line_in(b, "prefer = \"rail0\"\ndscp = \"AF11\""));
  EXPECT_EQ(d->front().kind, dp::PolicyChange::Kind::Changed);
  EXPECT_EQ(std::string(dp::to_string(d->back().kind)), "removed");
}

TEST(PolicyDiff, ANonTomlFileIsAnErrorWithItsPosition) {
  auto d = dp::diff_policies(kLab, "running", "[node\nname = 1\n", "bad.toml");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().what().find("bad.toml:1:"), std::string::npos) << d.error().what();
}

}  // namespace

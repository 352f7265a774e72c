// SPDX-License-Identifier: Apache-2.0
// dualpath-policy(5) names every key the parser takes, section by section,
// and no other: checked against the parser's own lists (the "allowed:" of
// its unknown-key refusal), so that the reference cannot drift.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "dualpath/core/policy.h"

namespace {

const char* kAll = R"([node]
name = "n1"
[routing]
[scheduler]
[health]
[measurement]
[metrics]
[responder]
[[path]]
name = "rail0"
interface = "eth0"
gateway = "10.0.0.1"
capacity = "1Gbit"
table = 100
fwmark = 0x100
[[class]]
name = "c"
kind = "elastic"
prefer = "rail0"
ports = ["tcp:50000"]
)";

std::set<std::string> split(const std::string& list) {
  std::set<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    out.insert(item);
  }
  return out;
}

// What the parser allows in `section` ("[node]", "[[path]]", "" for the top level).
std::set<std::string> allowed(const std::string& section) {
  std::string text = kAll;
  if (section.empty()) {
    text = "zz_unknown = 1\n" + text;
  } else {
    auto at = text.find(section + "\n");
    EXPECT_NE(at, std::string::npos) << section;
    text.insert(at + section.size() + 1, "zz_unknown = 1\n");
  }
  auto load = dp::parse_policy(text, "ref.toml");
  for (const auto& e : load.errors) {
    std::smatch m;
    if (std::regex_search(e.message, m,
                          std::regex(R"(unknown key "zz_unknown" .*\(allowed: (.*)\))")))
      return split(m[1].str());
  }
  ADD_FAILURE() << "no unknown-key refusal in " << section;
  return {};
}

// The keys dualpath-policy(5) documents, by section.
std::map<std::string, std::set<std::string>> documented() {
  std::ifstream in(std::string(DP_SOURCE_DIR) + "/docs/man/dualpath-policy.5.scd");
  std::map<std::string, std::set<std::string>> out;
  std::string line, section = "?";
  const std::regex heading(R"(^## (\[\[?[a-z]+\]\]?)$)"), key(R"(\*([a-z0-9_]+)\* \()");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, heading)) {
      section = m[1].str();
      continue;
    }
    if (line.rfind("The top level takes the sections", 0) == 0) {
      std::string para = line;
      while (std::getline(in, line) && !line.empty()) para += " " + line;
      const std::regex word(R"(\*([a-z]+)\*)");
      for (std::sregex_iterator it(para.begin(), para.end(), word), end; it != end; ++it)
        out[""].insert((*it)[1].str());
      continue;
    }
    if (line.empty() || line[0] != '*') continue;  // keys start their line
    for (std::sregex_iterator it(line.begin(), line.end(), key), end; it != end; ++it)
      out[section].insert((*it)[1].str());
  }
  return out;
}

TEST(PolicyReference, EverySectionDocumentsExactlyTheKeysTheParserTakes) {
  auto doc = documented();
  for (const std::string section :
       {"", "[node]", "[routing]", "[scheduler]", "[health]", "[measurement]", "[metrics]",
        "[responder]", "[[path]]", "[[class]]"}) {
    SCOPED_TRACE(section.empty() ? "the top level" : section);
    auto parser = allowed(section);
    ASSERT_FALSE(parser.empty());
    for (const auto& k : parser) EXPECT_TRUE(doc[section].count(k)) << "undocumented: " << k;
    for (const auto& k : doc[section]) EXPECT_TRUE(parser.count(k)) << "not a key: " << k;
  }
}

}  // namespace

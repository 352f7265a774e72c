// SPDX-License-Identifier: Apache-2.0
// dualpath-policy(5) names every key the parser takes, section by section,
// and no other: checked against the parser's own lists (the "allowed:" of
// its unknown-key refusal), so that the reference cannot drift.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "dualpath/core/policy.h"
#include "dualpath/core/policy_schema.h"

namespace {

const char* kAll = R"([node]
name = "n1"
[routing]
[scheduler]
[health]
[measurement]
[metrics]
[events]
[responder]
[qos]
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
        "[events]", "[responder]", "[qos]", "[[path]]", "[[class]]"}) {
    SCOPED_TRACE(section.empty() ? "the top level" : section);
    auto parser = allowed(section);
    ASSERT_FALSE(parser.empty());
    for (const auto& k : parser) EXPECT_TRUE(doc[section].count(k)) << "undocumented: " << k;
    for (const auto& k : doc[section]) EXPECT_TRUE(parser.count(k)) << "not a key: " << k;
  }
}

}  // namespace

namespace {

// Integer keys dualpath-policy(5) gives a range LO-HI for, by section.
struct Range {
  std::string section, key;
  long long lo, hi;
};
std::vector<Range> documented_ranges() {
  std::ifstream in(std::string(DP_SOURCE_DIR) + "/docs/man/dualpath-policy.5.scd");
  std::vector<Range> out;
  std::string line, section = "?";
  const std::regex heading(R"(^## (\[\[?[a-z]+\]\]?)$)"),
      range(R"(^\*([a-z0-9_]+)\* \(integer[^)]*?\b(\d+)-(\d+))");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, heading))
      section = m[1].str();
    else if (std::regex_search(line, m, range))
      out.push_back({section, m[1].str(), std::stoll(m[2].str()), std::stoll(m[3].str())});
  }
  return out;
}

// kAll with `key = value` in `section`, replacing the key if kAll has it.
std::string with_key(const std::string& section, const std::string& key, long long value) {
  std::string text = kAll;
  auto at = text.find(section + "\n");
  EXPECT_NE(at, std::string::npos) << section;
  size_t body = at + section.size() + 1;
  size_t end = text.find("\n[", body);
  std::string line = key + " = ";
  auto had = text.find("\n" + line, body - 1);
  if (had != std::string::npos && (end == std::string::npos || had < end))
    text.erase(had + 1, text.find('\n', had + 1) - had);
  text.insert(body, line + std::to_string(value) + "\n");
  return text;
}

bool refused_for(const std::string& text, const std::string& key) {
  for (const auto& e : dp::parse_policy(text, "ref.toml").errors)
    if (e.message.find(key) != std::string::npos) return true;
  return false;
}

}  // namespace

// The ranges the reference documents are the parser's: just outside each is
// refused, naming the key, and its ends are taken (where the key has no
// other rule that an end breaks, said below).
TEST(PolicyReference, EveryDocumentedIntegerRangeIsTheParsers) {
  auto ranges = documented_ranges();
  ASSERT_GE(ranges.size(), 9u) << "the reference's integer ranges were not found";
  for (const auto& r : ranges) {
    SCOPED_TRACE(r.section + " " + r.key);
    EXPECT_TRUE(refused_for(with_key(r.section, r.key, r.hi + 1), r.key)) << r.hi + 1;
    EXPECT_TRUE(refused_for(with_key(r.section, r.key, r.lo - 1), r.key)) << r.lo - 1;
    // fwmark, mark and redirect_mark: the top end has the redirect bit (or
    // more than one), refused on its own; mark_mask: the bottom end leaves
    // out the redirect bit (documented beside the range)
    bool top_has_more_rules = r.key == "fwmark" || r.key == "mark" || r.key == "redirect_mark";
    bool bottom_has_more_rules = r.key == "mark_mask";
    if (!bottom_has_more_rules) {
      EXPECT_FALSE(refused_for(with_key(r.section, r.key, r.lo), r.key)) << r.lo;
    }
    if (!top_has_more_rules) {
      EXPECT_FALSE(refused_for(with_key(r.section, r.key, r.hi), r.key)) << r.hi;
    }
  }
}

// The schema (policy_schema.h) against the reference: each declared key has
// its line in its section, whose parenthesis begins with the declared type,
// says "required" exactly when the key is, gives the declared default and
// the declared range; and each declared default is what a policy without
// the key has.
namespace {

// "*key* (...)" (or "*key.*_N_ (...)") of each section: the parenthesis,
// which may go on over the next lines.
std::map<std::string, std::map<std::string, std::string>> documented_parentheses() {
  std::ifstream in(std::string(DP_SOURCE_DIR) + "/docs/man/dualpath-policy.5.scd");
  std::map<std::string, std::map<std::string, std::string>> out;
  std::string line, section = "?";
  const std::regex heading(R"(^## \[\[?([a-z]+)\]\]?$)"),
      key(R"(\*([a-z0-9_]+)(?:\*|\.\*_[A-Z]+_) \()");
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, heading)) {
      section = m[1].str();
      continue;
    }
    if (line.empty() || line[0] != '*') continue;
    std::string text = line;
    while (std::count(text.begin(), text.end(), '(') > std::count(text.begin(), text.end(), ')') &&
           std::getline(in, line))
      text += " " + line;
    for (std::sregex_iterator it(text.begin(), text.end(), key), end; it != end; ++it) {
      size_t open = static_cast<size_t>(it->position(0) + it->length(0)), depth = 1, at = open;
      for (; at < text.size() && depth; ++at)
        depth += text[at] == '(' ? 1 : text[at] == ')' ? -1 : 0;
      out[section][(*it)[1].str()] = text.substr(open, at - open - 1);
    }
  }
  return out;
}

}  // namespace

TEST(PolicyReference, EveryDeclaredKeyIsDocumentedWithItsTypeDefaultAndRange) {
  auto doc = documented_parentheses();
  size_t keys = 0;
  for (const auto& s : dp::schema::sections()) {
    for (const auto& k : s.keys) {
      SCOPED_TRACE(s.title() + " " + std::string(k.name));
      ++keys;
      auto it = doc[std::string(s.name)].find(std::string(k.name));
      if (it == doc[std::string(s.name)].end()) {
        ADD_FAILURE() << "not in dualpath-policy(5)";
        continue;
      }
      const std::string& paren = it->second;
      EXPECT_EQ(paren.rfind(std::string(k.doc_type), 0), 0u) << paren;
      EXPECT_EQ(paren.find("required") != std::string::npos, k.required) << paren;
      if (!k.default_value.empty()) {
        EXPECT_NE(paren.find("default " + std::string(k.default_value)), std::string::npos)
            << paren;
      }
      if (std::string range = dp::schema::range_text(k); !range.empty()) {
        EXPECT_NE(paren.find(range), std::string::npos) << "range " << range << ": " << paren;
      }
    }
    // and the reference documents no key the schema does not declare
    for (const auto& [name, paren] : doc[std::string(s.name)])
      EXPECT_TRUE(s.key(name)) << s.title() << " " << name << " is documented, not declared";
  }
  EXPECT_GE(keys, 60u);
}

TEST(PolicyReference, EveryDeclaredDefaultIsWhatAPolicyWithoutTheKeyHas) {
  size_t checked = 0;
  for (const auto& s : dp::schema::sections()) {
    for (const auto& k : s.keys) {
      if (!k.set || k.default_value.empty() || k.default_value == "none") continue;
      SCOPED_TRACE(s.title() + " " + std::string(k.name));
      // the default, read as a value of the key by the policy's own reader
      std::string text = kAll, line = std::string(k.name) + " = " + std::string(k.default_value);
      auto at = text.find(s.title() + "\n");
      ASSERT_NE(at, std::string::npos);
      text.insert(at + s.title().size() + 1, line + "\n");
      auto with = dp::parse_policy(text, "ref.toml");
      auto without = dp::parse_policy(kAll, "ref.toml");
      ASSERT_TRUE(with.policy) << line << ": " << (with.errors.empty() ? "" : with.errors[0].str());
      ASSERT_TRUE(without.policy);
      EXPECT_TRUE(with.policy->same_settings(*without.policy)) << line;
      ++checked;
    }
  }
  EXPECT_GE(checked, 30u);
}

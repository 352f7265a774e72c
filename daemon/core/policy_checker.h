// SPDX-License-Identifier: Apache-2.0
// What the policy's parts share (daemon/core/policy*.cpp only): the Checker,
// which collects refusals with the file, line and column of what they refuse,
// reads a declared key (policy_schema.h) with its type's refusals, and the
// functions that read and check each section, in the order check_policy()
// calls them.
#pragma once

#include <fmt/format.h>
#include <toml++/toml.h>

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/policy_schema.h"

namespace dp::policy_parts {

class Checker {
 public:
  explicit Checker(std::string file) : file_(std::move(file)) {}

  // A node read from another file (a cluster description's, when dpctl
  // policy render checks a node's policy) is named by that file.
  void error(const toml::source_region& at, std::string msg);
  void error(const toml::node& at, std::string msg) { error(at.source(), std::move(msg)); }
  std::vector<Diagnostic> take() { return std::move(errors_); }

  // Refuses keys not in `allowed`, naming the section they are in, with the
  // nearest allowed name as a hint. At the top level the keys are sections
  // ([node], [[path]], ...); `arrays` are those written [[...]].
  void only_keys(const toml::table& t, const std::vector<std::string_view>& allowed,
                 std::string_view section, const std::vector<std::string_view>& arrays = {});
  // Whether only_keys() refused a key like `name` (a misspelt section is not
  // also reported missing).
  bool refused_like(std::string_view name) const;

  // The declared keys of `s` that the generic reader takes, into `target`
  // (`label` names the section in refusals: "[scheduler]", "path \"rail0\"").
  // Custom keys are left to the section's function; `except` too.
  void read_keys(const toml::table& t, const schema::Section& s, std::string_view label,
                 schema::Target& target, std::initializer_list<std::string_view> except = {});
  // One declared key: its value, or nothing (absent, or refused).
  std::optional<schema::Value> read(const toml::table& t, const schema::Key& k,
                                    std::string_view label);

  std::optional<std::string> string(const toml::table& t, std::string_view key,
                                    std::string_view section, bool required);
  std::optional<int64_t> integer(const toml::table& t, std::string_view key,
                                 std::string_view section, bool required, int64_t lo, int64_t hi);
  std::optional<std::chrono::nanoseconds> duration(const toml::table& t, std::string_view key,
                                                   std::string_view section,
                                                   const schema::Duration& range,
                                                   std::string_view why);

 private:
  std::optional<bool> boolean(const toml::table& t, std::string_view key, std::string_view section);
  std::optional<size_t> word(const toml::table& t, std::string_view key, std::string_view section,
                             bool required, const std::vector<std::string_view>& words,
                             std::string_view why);
  std::optional<double> number(const toml::table& t, std::string_view key, std::string_view section,
                               double above, double at_most);
  std::optional<IpAddr> address(const toml::table& t, std::string_view key,
                                std::string_view section, int family);

  std::string file_;
  std::vector<Diagnostic> errors_;
  std::vector<std::string> unknown_;
};

// A section's table with its keys refused or read as declared (`name` as
// schema::sections() has it); null when the policy does not have it. A
// section that is not a table is refused.
const toml::table* read_section(Checker& c, const toml::table& root, std::string_view name,
                                Policy& p);
// The entries of an array section ([[path]], [[class]]): refused unless
// written as [[name]] or when more than `max`; null when absent (refused
// with `missing` when that is not empty).
const toml::array* entries(Checker& c, const toml::table& root, std::string_view name,
                           const std::string& missing, size_t max, std::string_view plural);

// The value node of `key`, or the table where it is missing.
const toml::node& where(const toml::table& t, std::string_view key);
// A name for a message: control bytes escaped.
std::string printable(const std::string& s);

// The sections, each read and checked in the order check_policy() calls them.
void parse_node(Checker& c, const toml::table& root, Policy& p);
void parse_routing(Checker& c, const toml::table& root, Policy& p);
void parse_scheduler(Checker& c, const toml::table& root, Policy& p);
void parse_health(Checker& c, const toml::table& root, Policy& p);
void parse_measurement(Checker& c, const toml::table& root, Policy& p);
void parse_paths(Checker& c, const toml::table& root, Policy& p);
void check_topology(Checker& c, const toml::table& root, const Policy& p);
void parse_classes(Checker& c, const toml::table& root, Policy& p);
void parse_responder(Checker& c, const toml::table& root, Policy& p);
void check_responder(Checker& c, const toml::table& root, const Policy& p);
void parse_qos(Checker& c, const toml::table& root, Policy& p);
void parse_nccl(Checker& c, const toml::table& root, Policy& p);
void parse_peers(Checker& c, const toml::table& root, Policy& p);

// Values of their own form, shared by sections.
// A DSCP: a number 0-63 or a name ("EF", "AF41", "CS1").
std::optional<uint8_t> parse_dscp_key(Checker& c, const toml::table& t, const char* key,
                                      const std::string& where);
// An skb->priority: a band 0-7, or a tc class id written as a string ("1:10").
std::optional<uint32_t> parse_skb_priority_key(Checker& c, const toml::table& t, const char* key,
                                               const std::string& where);

}  // namespace dp::policy_parts

// SPDX-License-Identifier: Apache-2.0
// The policy's schema as data: for every section, each key's name, type,
// range, default, unit, whether it is required, its one-line description and
// the hint its refusal carries. The parser reads every typed key from these
// declarations (daemon/core/policy_schema.cpp); a key whose value has a form
// of its own (a port range, a cgroup rule, a peer's addresses) names the
// function that reads it. The unknown-key refusals list the declared keys,
// and tests/unit/test_policy_reference.cpp proves dualpath-policy(5) names
// the same keys with the same types, defaults and ranges.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dualpath/core/policy.h"

namespace dp::schema {

// The types a key's value may have, each with its range.
struct Boolean {};
struct Integer {
  int64_t lo, hi;  // inclusive
};
struct Number {
  double above, at_most;  // lo < v <= hi
};
struct Duration {
  std::chrono::nanoseconds min{0};
  std::chrono::nanoseconds max = std::chrono::hours(24 * 365);
};
struct Text {};  // a string
struct Word {    // one of these strings
  std::vector<std::string_view> words;
};
struct Address {
  int family;  // AF_INET, AF_INET6, or 0 for either
};
struct Custom {};  // read by the section's own function, named in `reads`
using Type = std::variant<Boolean, Integer, Number, Duration, Text, Word, Address, Custom>;

// A value the generic reader took, for a key's setter. A Word is the index of
// the word in Word::words.
using Value = std::variant<bool, int64_t, double, std::chrono::nanoseconds, std::string, IpAddr>;

// A Value as its type's C++ value, for setters and checks.
inline bool flag_of(const Value& v) { return std::get<bool>(v); }
inline int64_t integer_of(const Value& v) { return std::get<int64_t>(v); }
inline double number_of(const Value& v) { return std::get<double>(v); }
inline std::chrono::nanoseconds duration_of(const Value& v) {
  return std::get<std::chrono::nanoseconds>(v);
}
inline const std::string& text_of(const Value& v) { return std::get<std::string>(v); }
inline const IpAddr& address_of(const Value& v) { return std::get<IpAddr>(v); }

inline constexpr int64_t kMaxU32 = 0xFFFFFFFFll;

// What a setter writes to: the policy, and for a [[path]] or [[class]] entry
// the entry being read.
struct Target {
  Policy& policy;
  PathSpec* path = nullptr;
  ClassSpec* klass = nullptr;
};

struct Key {
  std::string_view name;
  Type type;
  // As dualpath-policy(5) writes the type: "integer", "duration", "rate",
  // "array of prefixes"; its parenthesis begins with this.
  std::string_view doc_type;
  bool required = false;
  // The default as the reference writes it after "default " ("10000",
  // "\"adaptive\"", "none"); empty where the reference says it in prose.
  std::string_view default_value = {};
  std::string_view unit = {};   // "bit/s", "seconds", "percent"; empty: none
  std::string_view about = {};  // one line: what it sets
  // Appended to a refusal of its type or range: why the limit is there, or
  // what the words mean.
  std::string_view hint = {};
  // The range as the reference writes it, where a `check` narrows the
  // type's ("0 or 1ms to 200ms"); empty: the type's (range_text()).
  std::string_view range = {};
  // A further rule on the value read: "" when it holds, else the whole
  // refusal (the value is then not set).
  std::string (*check)(const Value& v, std::string_view section) = nullptr;
  void (*set)(Target& t, const Value& v) = nullptr;  // null for Custom
  // For a Custom key: the function that reads it, by name (documentation).
  std::string_view reads = {};
};

struct Section {
  std::string_view name;  // "node", "path"
  bool array = false;     // written [[name]]
  bool required = false;
  // Held for every node of a cluster description, which a group or a node
  // may override (dualpath-cluster(5)).
  bool node_settings = false;
  std::string_view about;
  std::vector<Key> keys;
  // "[node]", "[[path]]": how the refusals name it before an entry's name is known.
  std::string title() const;
  const Key* key(std::string_view k) const;
  std::vector<std::string_view> key_names() const;
};

// Every section, in the order the reference gives them.
const std::vector<Section>& sections();
const Section& section(std::string_view name);

// The integer, number or duration range a key's declaration gives, as the
// reference writes it ("1-32000", "above 0 and at most 1", "10ms to 60s",
// "at least 100ms", "at most 10s"); "" for other types.
std::string range_text(const Key& k);

}  // namespace dp::schema

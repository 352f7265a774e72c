// SPDX-License-Identifier: Apache-2.0
#include "golden.h"

#include <set>

namespace lab {

namespace {

// Strings whose value is part of the contract (names, codes, messages).
const std::set<std::string> kExact = {"name",  "interface", "kind",    "prefer",  "match",
                                      "code",  "message",   "node",    "class",   "path",
                                      "proto", "rail",      "gateway", "gateway6"};
// Arrays whose length depends on traffic and time: the first element stands for all.
const std::set<std::string> kVariable = {"flows", "events", "checks"};
// Objects whose keys depend on traffic (only non-zero exception counters).
const std::set<std::string> kOpaque = {"exceptions"};

json shape(const json& v, const std::string& key) {
  switch (v.type()) {
    case json::value_t::object: {
      if (kOpaque.count(key)) return "object";
      json out = json::object();
      for (auto& [k, x] : v.items()) out[k] = shape(x, k);
      return out;
    }
    case json::value_t::array: {
      json out = json::array();
      for (auto& x : v) {
        out.push_back(shape(x, key));
        if (kVariable.count(key)) break;
      }
      return out;
    }
    case json::value_t::string:
      return kExact.count(key) ? v : json("string");
    case json::value_t::boolean:
      return key == "ok" ? v : json("bool");
    case json::value_t::null:
      return nullptr;
    default:
      return "number";
  }
}

}  // namespace

json reply_shape(const json& reply) { return shape(reply, ""); }

std::vector<std::string> shape_diff(const json& golden, const json& actual,
                                    const std::string& where) {
  std::vector<std::string> out;
  if (golden.is_null() || actual.is_null()) return out;  // not measured yet: timing
  if (golden.type() != actual.type()) {
    out.push_back(where + ": " + golden.dump() + " became " + actual.dump());
    return out;
  }
  if (golden.is_object()) {
    for (auto& [k, v] : golden.items()) {
      if (!actual.contains(k))
        out.push_back(where + "." + k + ": missing");
      else
        for (auto& d : shape_diff(v, actual[k], where + "." + k)) out.push_back(d);
    }
    for (auto& [k, v] : actual.items())
      if (!golden.contains(k)) out.push_back(where + "." + k + ": new key");
    return out;
  }
  if (golden.is_array()) {
    // variable-length arrays hold at most one element; an empty one says nothing
    if (golden.size() != actual.size() && golden.size() > 1)
      out.push_back(where + ": " + std::to_string(golden.size()) + " elements became " +
                    std::to_string(actual.size()));
    for (size_t i = 0; i < golden.size() && i < actual.size(); ++i)
      for (auto& d : shape_diff(golden[i], actual[i], where + "[" + std::to_string(i) + "]"))
        out.push_back(d);
    return out;
  }
  if (golden != actual) out.push_back(where + ": " + golden.dump() + " became " + actual.dump());
  return out;
}

}  // namespace lab

// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/policy_diff.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include "dualpath/core/policy.h"
#include "dualpath/core/policy_toml.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace dp {

namespace {

// The arrays of tables whose entries are identified by their "name".
bool named_array(const std::string& key) { return key == "path" || key == "class"; }

int line_of(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

// A table's entries in the order the file has them (toml++ keeps them sorted).
std::vector<std::pair<std::string, const toml::node*>> in_file_order(const toml::table& t) {
  std::vector<std::pair<std::string, const toml::node*>> v;
  for (auto& [k, n] : t) v.push_back({std::string(k.str()), &n});
  std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) {
    auto pa = a.second->source().begin, pb = b.second->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return v;
}

}  // namespace

// One line of TOML for a value: tables inline, floats shortest.
std::string render_toml_value(const toml::node& n) {
  if (auto* t = n.as_table()) {
    std::string s = "{ ";
    bool first = true;
    for (auto& [k, v] : in_file_order(*t)) {
      s += (first ? "" : ", ") + k + " = " + render_toml_value(*v);
      first = false;
    }
    return s + " }";
  }
  if (auto* a = n.as_array()) {
    std::string s = "[";
    for (size_t i = 0; i < a->size(); ++i) s += (i ? ", " : "") + render_toml_value(*a->get(i));
    return s + "]";
  }
  if (auto* f = n.as_floating_point()) {
    // a float stays one when it is read back ("1.0", not the integer "1")
    std::string s = fmt::format("{}", f->get());
    return s.find_first_of(".eEna") == std::string::npos ? s + ".0" : s;
  }
  std::ostringstream out;
  n.visit([&](const auto& v) {
    if constexpr (!toml::is_table<decltype(v)> && !toml::is_array<decltype(v)>) out << v;
  });
  return out.str();
}

namespace {

// Where a change is in the document: keys, and for [[path]]/[[class]]
// entries the entry's name.
struct Step {
  std::string key;
  std::optional<std::string> name;
};

struct Found {
  PolicyChange change;
  std::vector<Step> steps;
  const toml::node* after = nullptr;  // the new value (null: removed)
};

struct Differ {
  std::vector<Found> out;

  void record(PolicyChange c, const std::vector<Step>& steps, const toml::node* after) {
    out.push_back({std::move(c), steps, after});
  }

  void node(const std::string& where, const std::vector<Step>& steps, const toml::node* a,
            const toml::node* b) {
    if (a && !b) {
      record({PolicyChange::Kind::Removed, where, render_toml_value(*a), std::nullopt, line_of(*a)},
             steps, nullptr);
      return;
    }
    if (!a && b) {
      record({PolicyChange::Kind::Added, where, std::nullopt, render_toml_value(*b), line_of(*b)},
             steps, b);
      return;
    }
    if (a->is_table() && b->is_table()) return table(where, steps, *a->as_table(), *b->as_table());
    std::string ra = render_toml_value(*a), rb = render_toml_value(*b);
    if (a->type() == b->type() && ra == rb) return;
    record({PolicyChange::Kind::Changed, where, ra, rb, line_of(*b)}, steps, b);
  }

  static std::string join(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }
  static std::vector<Step> then(std::vector<Step> steps, Step s) {
    steps.push_back(std::move(s));
    return steps;
  }

  // [[path]] / [[class]]: entries matched by name, in the new file's order,
  // removed ones after
  void named(const std::string& key, const toml::array& a, const toml::array& b) {
    auto by_name = [](const toml::array& arr) {
      std::vector<std::pair<std::string, const toml::table*>> v;
      for (auto& e : arr)
        if (auto* t = e.as_table()) v.push_back({(*t)["name"].value_or(std::string{}), t});
      return v;
    };
    auto va = by_name(a), vb = by_name(b);
    std::map<std::string, const toml::table*> ma(va.begin(), va.end());
    std::map<std::string, const toml::table*> mb(vb.begin(), vb.end());
    auto label = [&](const std::string& name) { return key + " \"" + name + "\""; };
    for (auto& [name, t] : vb) {
      auto it = ma.find(name);
      node(label(name), {{key, name}}, it == ma.end() ? nullptr : it->second, t);
    }
    for (auto& [name, t] : va)
      if (!mb.count(name)) node(label(name), {{key, name}}, t, nullptr);
  }

  // in the new file's order; what it no longer has right after the table's
  // other entries
  void table(const std::string& where, const std::vector<Step>& steps, const toml::table& a,
             const toml::table& b) {
    for (auto& [key, v] : in_file_order(b)) {
      const toml::node* old = a.get(key);
      if (where.empty() && named_array(key) && old && old->is_array() && v->is_array())
        named(key, *old->as_array(), *v->as_array());
      else
        node(join(where, key), then(steps, {key, std::nullopt}), old, v);
    }
    for (auto& [key, v] : in_file_order(a))
      if (!b.contains(key)) node(join(where, key), then(steps, {key, std::nullopt}), v, nullptr);
  }
};

// Whether one key's change, made alone to the old document, leaves the
// policy the same: another spelling of the value (0x110 and 272, "500us"
// and "0.5ms", "EF" and 46), or a default written out or left out.
bool no_effect(const toml::table& old_doc, const Policy& old_policy, const Found& f) {
  if (f.steps.empty() || f.steps.back().name) return false;  // a whole [[path]]/[[class]]
  toml::table doc = old_doc;
  toml::table* t = &doc;
  for (size_t i = 0; i + 1 < f.steps.size(); ++i) {
    const Step& s = f.steps[i];
    toml::node* n = t->get(s.key);
    if (n && s.name) {
      toml::node* entry = nullptr;
      if (auto* arr = n->as_array())
        for (auto& e : *arr)
          if (e.is_table() && (*e.as_table())["name"].value_or(std::string{}) == *s.name)
            entry = &e;
      n = entry;
    }
    t = n ? n->as_table() : nullptr;
    if (!t) return false;
  }
  const std::string& key = f.steps.back().key;
  if (f.after)
    f.after->visit([&](const auto& v) { t->insert_or_assign(key, v); });
  else
    t->erase(key);
  std::ostringstream text;
  text << doc;
  auto load = parse_policy(text.str(), old_policy.file);
  return load.ok() && load.policy->same_settings(old_policy);
}

Result<toml::table> parse(const std::string& text, const std::string& name) {
  try {
    return toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    return DP_ERROR("{}:{}:{}: error: {}", name, e.source().begin.line, e.source().begin.column,
                    e.description());
  }
}

}  // namespace

const char* to_string(PolicyChange::Kind k) {
  switch (k) {
    case PolicyChange::Kind::Added:
      return "added";
    case PolicyChange::Kind::Removed:
      return "removed";
    case PolicyChange::Kind::Changed:
      return "changed";
  }
  return "?";
}

std::string PolicyChange::str() const {
  switch (kind) {
    case Kind::Added:
      return "+ " + where + ": " + after.value_or("");
    case Kind::Removed:
      return "- " + where + ": " + before.value_or("");
    case Kind::Changed:
      return "~ " + where + ": " + before.value_or("") + " -> " + after.value_or("");
  }
  return where;
}

Result<std::vector<PolicyChange>> diff_policies(const std::string& before_text,
                                                const std::string& before_name,
                                                const std::string& after_text,
                                                const std::string& after_name) {
  auto a = parse(before_text, before_name);
  if (!a) return a.error();
  auto b = parse(after_text, after_name);
  if (!b) return b.error();
  Differ d;
  d.table("", {}, *a, *b);
  // Changes that make no difference to the policy are not changes. Only when
  // the old text is a valid policy: otherwise every difference is shown.
  auto old_policy = parse_policy(before_text, before_name);
  std::vector<PolicyChange> out;
  for (auto& f : d.out)
    if (!old_policy.ok() || !no_effect(*a, *old_policy.policy, f)) out.push_back(f.change);
  return out;
}

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/budget.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "dualpath/core/units.h"

namespace dp {

Result<double> parse_rate(std::string_view text) {
  std::string t(text);
  t.erase(std::remove_if(t.begin(), t.end(), [](unsigned char c) { return std::isspace(c); }),
          t.end());
  bool per_s = t.size() > 2 && t.substr(t.size() - 2) == "/s";
  if (per_s) t.resize(t.size() - 2);
  if (!t.empty() && t.back() == 'B') {  // bytes
    size_t i = 0;
    while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
    std::string num = t.substr(0, i), unit = t.substr(i);
    double v = 0;
    try {
      size_t used = 0;
      v = std::stod(num, &used);
      if (used != num.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      return DP_ERROR("rate \"{}\" has no number: write \"18MB/s\" or \"5Gbit\"", text);
    }
    static const std::pair<const char*, double> units[] = {
        {"B", 1},           {"KB", 1e3},           {"MB", 1e6},
        {"GB", 1e9},        {"TB", 1e12},          {"KiB", 1024.0},
        {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (auto& [name, mult] : units)
      if (unit == name) {
        if (!std::isfinite(v) || v < 0) return DP_ERROR("rate \"{}\" must not be negative", text);
        return v * mult * 8;
      }
    return DP_ERROR(
        "rate \"{}\" has an unknown unit \"{}\": use B, KB, MB, GB, KiB, MiB or GiB "
        "per second, or bits (\"5Gbit\")",
        text, unit);
  }
  auto bits = parse_bandwidth(t);
  if (!bits) return DP_ERROR("rate \"{}\": {}", text, bits.error().message);
  return static_cast<double>(*bits);
}

namespace {

std::string where(const toml::node& n, const std::string& name) {
  return fmt::format("{}:{}:{}", name, n.source().begin.line, n.source().begin.column);
}

Result<double> number(const toml::table& t, const char* key, const std::string& name, double lo,
                      double dflt, bool required = false) {
  const toml::node* n = t.get(key);
  if (!n) {
    if (required)
      return DP_ERROR("{}:{}: error: missing the required key \"{}\"", name, t.source().begin.line,
                      key);
    return dflt;
  }
  std::optional<double> v;
  if (auto* f = n->as_floating_point()) v = f->get();
  if (auto* i = n->as_integer()) v = static_cast<double>(i->get());
  if (!v || !std::isfinite(*v) || *v < lo)
    return DP_ERROR("{}: error: \"{}\" must be a number of at least {}", where(*n, name), key, lo);
  return *v;
}

}  // namespace

Result<BudgetPlan> parse_budget(const std::string& text, const std::string& name) {
  toml::table root;
  try {
    root = toml::parse(text, name);
  } catch (const toml::parse_error& e) {
    return DP_ERROR("{}:{}:{}: error: {}", name, e.source().begin.line, e.source().begin.column,
                    e.description());
  }
  BudgetPlan plan;
  for (auto& [k, v] : root)
    if (k.str() != "headroom" && k.str() != "load" && k.str() != "kv")
      return DP_ERROR("{}: error: unknown key \"{}\" (allowed: headroom, load, kv)", where(v, name),
                      k.str());
  auto h = number(root, "headroom", name, 1, 1);
  if (!h) return h.error();
  plan.headroom = *h;
  if (const toml::node* n = root.get("load")) {
    auto* arr = n->as_array();
    if (!arr || !arr->is_array_of_tables())
      return DP_ERROR("{}: error: \"load\" must be written as [[load]] sections", where(*n, name));
    for (auto& e : *arr) {
      auto& t = *e.as_table();
      BudgetLoad l;
      l.line = static_cast<int>(t.source().begin.line);
      for (auto& [k, v] : t)
        if (k.str() != "class" && k.str() != "concurrency" && k.str() != "per_request" &&
            k.str() != "amplification")
          return DP_ERROR(
              "{}: error: unknown key \"{}\" in [[load]] (allowed: class, concurrency, "
              "per_request, amplification)",
              where(v, name), k.str());
      if (auto* c = t.get_as<std::string>("class")) l.klass = c->get();
      auto conc = number(t, "concurrency", name, 0, 1);
      if (!conc) return conc.error();
      auto amp = number(t, "amplification", name, 1, 1);
      if (!amp) return amp.error();
      l.concurrency = *conc;
      l.amplification = *amp;
      auto* r = t.get_as<std::string>("per_request");
      if (!r)
        return DP_ERROR("{}:{}: error: [[load]] needs per_request, a rate such as \"18MB/s\"", name,
                        l.line);
      auto rate = parse_rate(r->get());
      if (!rate) return DP_ERROR("{}: error: {}", where(*r, name), rate.error().message);
      l.per_request_bps = *rate;
      plan.loads.push_back(std::move(l));
    }
  }
  if (auto* t = root.get_as<toml::table>("kv")) {
    KvSpec kv;
    struct {
      const char* key;
      uint64_t* dst;
    } ints[] = {{"layers", &kv.layers},
                {"kv_heads", &kv.kv_heads},
                {"head_dim", &kv.head_dim},
                {"tokens", &kv.tokens},
                {"sequences", &kv.sequences}};
    for (auto& [key, dst] : ints) {
      auto v = number(*t, key, name, 1, static_cast<double>(*dst), std::string(key) != "sequences");
      if (!v) return v.error();
      *dst = static_cast<uint64_t>(*v);
    }
    auto b = number(*t, "bytes_per_element", name, 0.125, 2);
    if (!b) return b.error();
    kv.bytes_per_element = *b;
    plan.kv = kv;
  }
  return plan;
}

namespace {

// The scheduler's order: on a rail above the threshold, elastic classes
// yield lowest priority first; latency-sensitive ones never spill. The
// class that spills first off the hottest rail `hot`, if any.
json first_to_spill(const Policy& policy, const std::vector<double>& per_class,
                    std::optional<size_t> hot, json& notes) {
  if (!hot) return nullptr;
  const ClassSpec* first = nullptr;
  for (size_t k = 0; k < per_class.size(); ++k) {
    const auto& c = policy.classes[k];
    if (per_class[k] <= 0 || c.kind != ClassKind::Elastic || c.pinned ||
        policy.path_index(c.prefer) != static_cast<int>(*hot))
      continue;
    if (!first || c.priority < first->priority) first = &c;
  }
  json spill = {{"path", policy.paths[*hot].name},
                {"class", first ? json(first->name) : json(nullptr)}};
  if (!first)
    notes.push_back(
        fmt::format("{} is planned above its threshold and no elastic class on it "
                    "can spill: only latency-sensitive or pinned load is there",
                    policy.paths[*hot].name));
  return spill;
}

// What the policy's rails would carry under the plan: each class's demand on
// its preferred rail, against the rail's capacity and the scheduler's
// threshold; which class spills first; whether the plan fits at all.
void budget_rails(const Policy& policy, const std::vector<double>& per_class, double total,
                  json& out, json& notes) {
  const double thr = policy.scheduler.load_threshold;
  std::vector<double> on(policy.paths.size(), 0);
  for (size_t k = 0; k < per_class.size(); ++k)
    on[static_cast<size_t>(policy.path_index(policy.classes[k].prefer))] += per_class[k];
  double cap_total = 0;
  json rails = json::array();
  std::optional<size_t> hot;
  for (size_t r = 0; r < policy.paths.size(); ++r) {
    double cap = static_cast<double>(policy.paths[r].capacity_bps);
    cap_total += cap;
    double util = cap > 0 ? on[r] / cap : 0;
    if (util > thr &&
        (!hot || util > on[*hot] / static_cast<double>(policy.paths[*hot].capacity_bps)))
      hot = r;
    rails.push_back({{"path", policy.paths[r].name},
                     {"capacity_bps", cap},
                     {"planned_bps", on[r]},
                     {"utilisation", util},
                     {"threshold", thr},
                     {"over_threshold", util > thr},
                     {"over_capacity", util > 1}});
  }
  out["rails"] = rails;
  out["capacity_bps"] = cap_total;
  out["utilisation_of_both"] = cap_total > 0 ? total / cap_total : 0.0;
  out["first_to_spill"] = first_to_spill(policy, per_class, hot, notes);
  if (total > cap_total * thr && cap_total > 0)
    notes.push_back(
        fmt::format("the plan needs {:.0f}% of both rails together: above the "
                    "{:.0f}% threshold, so it does not fit with headroom on this "
                    "node",
                    100 * total / cap_total, 100 * thr));
}

// The KV cache the plan's model holds: per token, per sequence and in all.
json kv_cache(const KvSpec& kv) {
  double per_token =
      2.0 * static_cast<double>(kv.layers * kv.kv_heads * kv.head_dim) * kv.bytes_per_element;
  double per_seq = per_token * static_cast<double>(kv.tokens);
  return {{"bytes_per_token", per_token},
          {"bytes_per_sequence", per_seq},
          {"sequences", kv.sequences},
          {"bytes_total", per_seq * static_cast<double>(kv.sequences)}};
}

}  // namespace

json compute_budget(const BudgetPlan& plan, const Policy* policy) {
  json loads = json::array(), notes = json::array();
  std::vector<double> per_class(policy ? policy->classes.size() : 0, 0);
  double total = 0;
  for (auto& l : plan.loads) {
    double demand = l.concurrency * l.per_request_bps * l.amplification * plan.headroom;
    total += demand;
    int k = policy && !l.klass.empty() ? policy->class_index(l.klass) : -1;
    if (k >= 0) per_class[static_cast<size_t>(k)] += demand;
    if (policy && !l.klass.empty() && k < 0)
      notes.push_back(fmt::format(
          "{}: the policy has no class \"{}\"; it is counted in the total only",
          l.line ? fmt::format("load of line {}", l.line) : std::string("the load"), l.klass));
    loads.push_back({{"class", l.klass},
                     {"concurrency", l.concurrency},
                     {"per_request_bps", l.per_request_bps},
                     {"amplification", l.amplification},
                     {"headroom", plan.headroom},
                     {"demand_bps", demand},
                     {"demand_bytes_per_s", demand / 8}});
  }
  json out{{"loads", loads}, {"total_bps", total}, {"headroom", plan.headroom}};
  if (policy) budget_rails(*policy, per_class, total, out, notes);
  if (plan.kv) out["kv_cache"] = kv_cache(*plan.kv);
  out["notes"] = notes;
  return out;
}

}  // namespace dp

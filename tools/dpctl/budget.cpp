// SPDX-License-Identifier: Apache-2.0
// dpctl budget: the bandwidth arithmetic of a planned load against the
// node's rails (core/budget.h). No daemon needed: the rails come from
// --policy, or from the running daemon's policy when it answers.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "dpctl.h"
#include "dualpath/core/budget.h"
#include "dualpath/core/units.h"

namespace dpctl {

namespace {

// What to add up: loads from FILE or the options, against a policy's rails.
struct BudgetArgs {
  std::string file, policy, klass, rate, kv;
  double concurrency = 1, amplification = 1;
  std::optional<double> headroom;
};

std::string pct(double v) { return fmt::format("{:.1f}%", 100 * v); }

void print_budget(const json& b) {
  std::cout << fmt::format("{:<16} {:>11} {:>14} {:>13} {:>9} {:>14}\n", "LOAD", "CONCURRENCY",
                           "PER REQUEST", "AMPLIFICATION", "HEADROOM", "DEMAND");
  for (auto& l : b["loads"])
    std::cout << fmt::format(
        "{:<16} {:>11} {:>14} {:>13} {:>9} {:>14}\n",
        l["class"].get<std::string>().empty() ? "-" : l["class"].get<std::string>(),
        fmt::format("{:g}", l["concurrency"].get<double>()),
        dp::format_bytes(l["per_request_bps"].get<double>() / 8) + "/s",
        fmt::format("x{:g}", l["amplification"].get<double>()),
        fmt::format("x{:g}", l["headroom"].get<double>()),
        dp::format_bandwidth(l["demand_bps"].get<double>()));
  std::cout << fmt::format("{:<16} {:>65}\n", "total",
                           dp::format_bandwidth(b["total_bps"].get<double>()) + " (" +
                               dp::format_bytes(b["total_bps"].get<double>() / 8) + "/s)");
  if (b.contains("rails")) {
    std::cout << "\n"
              << fmt::format("{:<10} {:>14} {:>14} {:>12} {:>10}\n", "RAIL", "CAPACITY", "PLANNED",
                             "UTILISATION", "THRESHOLD");
    for (auto& r : b["rails"])
      std::cout << fmt::format("{:<10} {:>14} {:>14} {:>12} {:>10}{}\n", str(r["path"]),
                               dp::format_bandwidth(r["capacity_bps"].get<double>()),
                               dp::format_bandwidth(r["planned_bps"].get<double>()),
                               pct(r["utilisation"].get<double>()),
                               pct(r["threshold"].get<double>()),
                               r["over_capacity"].get<bool>()    ? "  OVER CAPACITY"
                               : r["over_threshold"].get<bool>() ? "  over the threshold"
                                                                 : "");
    std::cout << fmt::format("both rails: {} of {}\n", pct(b["utilisation_of_both"].get<double>()),
                             dp::format_bandwidth(b["capacity_bps"].get<double>()));
    const json& s = b["first_to_spill"];
    if (s.is_null())
      std::cout << "first to spill: none (every rail stays below its threshold, each class on "
                   "its preferred rail)\n";
    else if (!s["class"].is_null())
      std::cout << "first to spill: " << str(s["class"]) << " (from " << str(s["path"])
                << ": the lowest-priority elastic class there)\n";
  }
  if (b.contains("kv_cache")) {
    const json& k = b["kv_cache"];
    std::cout << "\nKV cache: " << dp::format_bytes(k["bytes_per_token"].get<double>())
              << " per token, " << dp::format_bytes(k["bytes_per_sequence"].get<double>())
              << " per sequence, " << dp::format_bytes(k["bytes_total"].get<double>()) << " for "
              << k["sequences"] << " sequences (before block rounding, replicas and reserve)\n";
  }
  for (auto& n : b["notes"]) std::cout << "NOTE: " << str(n) << "\n";
}

int cmd_budget(const Globals& g, const BudgetArgs& a) {
  dp::BudgetPlan plan;
  if (!a.file.empty()) {
    std::ifstream in(a.file);
    if (!in) return fail(g, fmt::format("cannot read {}: {}", a.file, std::strerror(errno)));
    std::stringstream ss;
    ss << in.rdbuf();
    auto p = dp::parse_budget(ss.str(), a.file);
    if (!p) return fail(g, p.error().message);
    plan = *p;
  }
  if (!a.rate.empty()) {
    auto r = dp::parse_rate(a.rate);
    if (!r) return fail(g, r.error().message);
    plan.loads.push_back({a.klass, a.concurrency, *r, a.amplification, 0});
  }
  if (a.headroom) plan.headroom = *a.headroom;
  if (!a.kv.empty()) {
    std::vector<double> v;
    std::stringstream ss(a.kv);
    for (std::string item; std::getline(ss, item, ',');) {
      try {
        v.push_back(std::stod(item));
      } catch (const std::exception&) {
        v.clear();
        break;
      }
    }
    if (v.size() < 5 || v.size() > 6 ||
        std::any_of(v.begin(), v.end(), [](double x) { return x <= 0; }))
      return fail(g,
                  "--kv is LAYERS,KV_HEADS,HEAD_DIM,BYTES_PER_ELEMENT,TOKENS[,SEQUENCES], "
                  "all positive");
    plan.kv =
        dp::KvSpec{static_cast<uint64_t>(v[0]), static_cast<uint64_t>(v[1]),
                   static_cast<uint64_t>(v[2]), v[3],
                   static_cast<uint64_t>(v[4]), v.size() > 5 ? static_cast<uint64_t>(v[5]) : 1};
  }
  if (plan.loads.empty() && !plan.kv)
    return fail(g,
                "nothing to compute: give a budget FILE, --rate (with --concurrency and "
                "--amplification), or --kv");

  std::optional<dp::Policy> policy;
  if (!a.policy.empty()) {
    auto load = dp::load_policy_file(a.policy);
    if (!load.ok()) return fail(g, load.errors.front().str());
    policy = *load.policy;
  } else if (auto r = dp::call(g.socket, json{{"cmd", "policy.show"}, {"args", json::object()}});
             r && (*r).value("ok", false)) {
    auto load = dp::parse_policy((*r)["data"]["text"].get<std::string>(),
                                 (*r)["data"]["file"].get<std::string>());
    if (load.ok()) policy = *load.policy;
  }
  // the class of --rate is the operator's word on this command line: a name
  // the policy does not have is a mistake, not a note
  if (policy && !a.rate.empty() && !a.klass.empty() && policy->class_index(a.klass) < 0) {
    std::string names;
    for (auto& c : policy->classes) names += (names.empty() ? "" : ", ") + c.name;
    return fail(g, fmt::format("--class {}: the policy ({}) has no such class; its classes are {}",
                               a.klass, policy->file, names));
  }
  json b = dp::compute_budget(plan, policy ? &*policy : nullptr);
  if (!policy)
    b["notes"].push_back(
        "no policy (give --policy FILE, or run it where dualpathd runs): the "
        "rails are not shown");
  else
    b["policy"] = policy->file;
  if (g.json_out) return print_json(g, b), 0;
  print_budget(b);
  return 0;
}

}  // namespace

void add_budget(CLI::App& app, const Globals& g, Action& action) {
  auto a = std::make_shared<BudgetArgs>();
  auto* bud = app.add_subcommand(
      "budget",
      "bandwidth a planned load needs on each rail, and the KV-cache size (against --policy "
      "FILE, or the running daemon's policy)");
  bud->add_option("FILE", a->file, "a budget TOML ([[load]] sections, [kv])");
  bud->add_option("--policy", a->policy, "the node's policy (default: the running one)")
      ->type_name(kFile);
  bud->add_option("--class", a->klass, "the class of the load given by --rate")->type_name(kClass);
  bud->add_option("--concurrency", a->concurrency, "requests at once")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  bud->add_option("--rate", a->rate, "per request: \"18MB/s\", \"2Gbit\"");
  bud->add_option("--amplification", a->amplification, "sharding, replicas, protocol")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e6));
  bud->add_option("--headroom", a->headroom, "multiply every demand by this (default 1)")
      ->check(CLI::Range(1.0, 1e6));
  bud->add_option("--kv", a->kv,
                  "KV cache: LAYERS,KV_HEADS,HEAD_DIM,BYTES_PER_ELEMENT,TOKENS[,SEQUENCES]");
  bud->callback([&g, &action, a] { action = [&g, a] { return cmd_budget(g, *a); }; });
}

}  // namespace dpctl

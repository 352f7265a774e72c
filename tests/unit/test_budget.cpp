// SPDX-License-Identifier: Apache-2.0
// dpctl budget's arithmetic (core/budget.h): the reference article's own
// example, rates, the plan file, the rails and the first class to spill,
// and the KV-cache formula.
#include <gtest/gtest.h>

#include "dualpath/core/budget.h"

namespace {

dp::Policy example_policy() {
  auto load = dp::load_policy_file(std::string(DP_POLICY_DIR) + "/example-node.toml");
  EXPECT_TRUE(load.ok());
  return *load.policy;
}

}  // namespace

TEST(Budget, TheArticlesExample) {
  // 32 concurrent requests x 18 MB/s x 1.2 = 691.2 MB/s = 5529.6 Mbit/s
  auto rate = dp::parse_rate("18MB/s");
  ASSERT_TRUE(rate);
  dp::BudgetPlan plan;
  plan.loads.push_back({"param-sync", 32, *rate, 1.2, 0});
  auto b = dp::compute_budget(plan, nullptr);
  EXPECT_DOUBLE_EQ(b["total_bps"].get<double>(), 5529.6e6);
  EXPECT_DOUBLE_EQ(b["loads"][0]["demand_bytes_per_s"].get<double>(), 691.2e6);
  EXPECT_FALSE(b.contains("rails")) << "no policy, no rails";
  // replicas doubling it: 11.06 Gbit/s, as the article goes on
  plan.loads[0].amplification = 2.4;
  EXPECT_NEAR(dp::compute_budget(plan, nullptr)["total_bps"].get<double>(), 11.06e9, 0.01e9);
}

TEST(Budget, RatesInBytesOrBits) {
  EXPECT_DOUBLE_EQ(*dp::parse_rate("18MB/s"), 144e6);
  EXPECT_DOUBLE_EQ(*dp::parse_rate("1 GiB/s"), 8.0 * 1073741824);
  EXPECT_DOUBLE_EQ(*dp::parse_rate("512KB"), 512e3 * 8);
  EXPECT_DOUBLE_EQ(*dp::parse_rate("5Gbit"), 5e9);
  EXPECT_DOUBLE_EQ(*dp::parse_rate("2.5Gbit/s"), 2.5e9);
  EXPECT_FALSE(dp::parse_rate("18 furlongs/s"));
  EXPECT_FALSE(dp::parse_rate("MB/s"));
  EXPECT_FALSE(dp::parse_rate("18XB/s"));
}

TEST(Budget, LaidOnThePreferredRailsWithTheFirstToSpill) {
  dp::Policy p = example_policy();  // roce 200 Gbit (dispatch, combine, control), eth 50 Gbit
  dp::BudgetPlan plan;
  plan.loads.push_back({"expert-combine", 64, 2e9, 1, 0});   // 128 Gbit/s on roce: 64%
  plan.loads.push_back({"expert-dispatch", 10, 1e9, 1, 0});  // 10 Gbit/s more on roce
  plan.loads.push_back({"logs", 1, 1e9, 1, 0});              // eth
  auto b = dp::compute_budget(plan, &p);
  ASSERT_EQ(b["rails"].size(), 2u);
  EXPECT_EQ(b["rails"][0]["path"], "roce");
  EXPECT_DOUBLE_EQ(b["rails"][0]["planned_bps"].get<double>(), 138e9);
  EXPECT_DOUBLE_EQ(b["rails"][0]["utilisation"].get<double>(), 0.69);
  EXPECT_TRUE(b["rails"][0]["over_threshold"].get<bool>());
  EXPECT_FALSE(b["rails"][1]["over_threshold"].get<bool>());
  // expert-combine is the only elastic class on roce; dispatch is latency-sensitive
  EXPECT_EQ(b["first_to_spill"]["class"], "expert-combine");
  EXPECT_EQ(b["first_to_spill"]["path"], "roce");

  // below the threshold: nothing spills
  plan.loads[0].concurrency = 32;
  EXPECT_TRUE(dp::compute_budget(plan, &p)["first_to_spill"].is_null());
  // a class the policy does not have is counted in the total, and said so
  plan.loads.push_back({"nosuch", 1, 1e9, 1, 7});
  auto n = dp::compute_budget(plan, &p);
  EXPECT_NE(n["notes"].dump().find("no class \\\"nosuch\\\""), std::string::npos) << n.dump();
}

TEST(Budget, HeadroomMultipliesEveryDemand) {
  dp::BudgetPlan plan;
  plan.headroom = 1.5;
  plan.loads.push_back({"", 10, 1e9, 1, 0});
  EXPECT_DOUBLE_EQ(dp::compute_budget(plan, nullptr)["total_bps"].get<double>(), 15e9);
}

TEST(Budget, KvCacheFormula) {
  // an 8B model with grouped-query attention: 32 layers, 8 KV heads of 128, fp16
  dp::BudgetPlan plan;
  plan.kv = dp::KvSpec{32, 8, 128, 2, 1280, 32};
  auto kv = dp::compute_budget(plan, nullptr)["kv_cache"];
  EXPECT_DOUBLE_EQ(kv["bytes_per_token"].get<double>(), 2.0 * 32 * 8 * 128 * 2);  // 131072
  EXPECT_DOUBLE_EQ(kv["bytes_per_sequence"].get<double>(), 131072.0 * 1280);
  EXPECT_DOUBLE_EQ(kv["bytes_total"].get<double>(), 131072.0 * 1280 * 32);
}

TEST(Budget, PlanFileWithItsErrorsLocated) {
  auto plan = dp::parse_budget(R"(headroom = 1.25
[[load]]
class = "param-sync"
concurrency = 32
per_request = "18MB/s"
amplification = 1.2

[kv]
layers = 32
kv_heads = 8
head_dim = 128
tokens = 1280
)",
                               "b.toml");
  ASSERT_TRUE(plan) << plan.error().message;
  ASSERT_EQ(plan->loads.size(), 1u);
  EXPECT_DOUBLE_EQ(plan->loads[0].per_request_bps, 144e6);
  EXPECT_EQ(plan->loads[0].line, 2);
  ASSERT_TRUE(plan->kv);
  EXPECT_EQ(plan->kv->sequences, 1u);
  EXPECT_DOUBLE_EQ(plan->kv->bytes_per_element, 2);

  auto bad = dp::parse_budget("[[load]]\nper_request = \"18 parsecs\"\n", "b.toml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("b.toml:2:15: error:"), std::string::npos)
      << bad.error().message;
  bad = dp::parse_budget("[[load]]\nper_request = \"1MB/s\"\nconcurrency = nan\n", "b.toml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("b.toml:3:"), std::string::npos) << bad.error().message;
  bad = dp::parse_budget("[[load]]\nconcurrency = 3\n", "b.toml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("needs per_request"), std::string::npos);
  bad = dp::parse_budget("headroom = 1\nspeed = 3\n", "b.toml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("unknown key \"speed\""), std::string::npos);
  bad = dp::parse_budget("[kv]\nlayers = 32\n", "b.toml");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("kv_heads"), std::string::npos) << bad.error().message;
}

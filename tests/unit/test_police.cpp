// SPDX-License-Identifier: Apache-2.0
// Reserves: what each rail's policer holds the classes without one to.
#include <gtest/gtest.h>

#include "dualpath/core/police.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/views.h"

namespace {

// Three classes on 1 Gbit + 250 Mbit: a line-rate latency-sensitive one
// without a reserve, an elastic one with 20 Mbit, one with 10% of a rail.
dp::Policy policy() {
  dp::Policy p;
  dp::PathSpec r0, r1;
  r0.name = "rail0";
  r0.capacity_bps = 1'000'000'000;
  r1.name = "rail1";
  r1.capacity_bps = 250'000'000;
  p.paths = {r0, r1};
  dp::ClassSpec ls, el, sh;
  ls.name = "dispatch";
  el.name = "kv";
  el.reserve_bps = 20'000'000;
  sh.name = "sync";
  sh.reserve_share = 0.10;
  p.classes = {ls, el, sh};
  return p;
}

const dp::Shares kOn0{10000, 0}, kOn1{0, 10000}, kSplit{5000, 5000};

TEST(Police, NothingIsPolicedWhereNoReservedClassIsCarried) {
  auto out = dp::plan_police(policy(), {kOn0, kOn1, kOn1}, {true, false, false});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].rate_bps, 0u);
  EXPECT_EQ(out[1].rate_bps, 0u) << "kv and sync are placed on rail1 but send nothing";
  EXPECT_TRUE(out[1].policed.empty());
}

TEST(Police, AFailedOverClassLeavesTheReservesCarriedOnTheSurvivor) {
  // rail0 failed: everything on rail1
  auto out = dp::plan_police(policy(), {kOn1, kOn1, kOn1}, {true, true, true});
  EXPECT_EQ(out[0].rate_bps, 0u);
  EXPECT_EQ(out[1].reserved_bps, 20'000'000u + 25'000'000u);
  EXPECT_EQ(out[1].rate_bps, 250'000'000u - 45'000'000u);
  EXPECT_EQ(out[1].policed, (std::vector<bool>{true, false, false}))
      << "only the class without a reserve is policed";
  // sync idle: its reserve is not kept
  out = dp::plan_police(policy(), {kOn1, kOn1, kOn1}, {true, true, false});
  EXPECT_EQ(out[1].rate_bps, 230'000'000u);
}

TEST(Police, ASplitClassKeepsItsReserveOnEachOfItsRails) {
  auto out = dp::plan_police(policy(), {kOn0, kSplit, kOn1}, {true, true, false});
  EXPECT_EQ(out[0].rate_bps, 980'000'000u);
  EXPECT_EQ(out[1].rate_bps, 230'000'000u);
}

TEST(Police, TheBucketHoldsTenMillisecondsAndATsoBurst) {
  EXPECT_EQ(dp::police_burst_bytes(230'000'000), 287'500u);
  EXPECT_EQ(dp::police_burst_bytes(10'000'000), 256u << 10) << "at least 256 KiB";
}

}  // namespace

// class.list shows each class's reserve per rail in bits a second: a share
// is of that rail's capacity; no reserve is null.
TEST(Police, TheClassListShowsAReservePerRail) {
  const dp::Policy p = policy();
  auto reserve_of = [&](size_t k) {
    dp::ClassView v;
    v.spec = &p.classes[k];
    for (size_t i = 0; i < p.paths.size(); ++i) {
      dp::ClassView::OnPath on;
      on.name = p.paths[i].name;
      on.rail_slot = i;
      on.capacity_bps = p.paths[i].capacity_bps;
      v.paths.push_back(on);
    }
    return dp::render_class(v)["reserve_bps"];
  };
  EXPECT_TRUE(reserve_of(0).is_null());
  EXPECT_EQ(reserve_of(1), (nlohmann::json{{"rail0", 20'000'000}, {"rail1", 20'000'000}}));
  EXPECT_EQ(reserve_of(2), (nlohmann::json{{"rail0", 100'000'000}, {"rail1", 25'000'000}}));
}

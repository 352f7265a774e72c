// SPDX-License-Identifier: Apache-2.0
// Decision and key encodings: what the daemon writes into the maps.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include "dualpath/core/encode.h"

namespace {

dp::Policy lab_policy() {
  auto r = dp::load_policy_file(std::string(DP_POLICY_DIR) + "/lab-a.toml");
  EXPECT_TRUE(r.ok());
  return *r.policy;
}

}  // namespace

TEST(Slots, NewNamesTakeLowestFreeSlots) {
  auto s = dp::assign_slots({}, {"a", "b", "c"}, 4);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, (std::vector<int>{0, 1, 2}));
}

TEST(Slots, KnownNamesKeepTheirSlots) {
  auto s = dp::assign_slots({"a", "", "c", ""}, {"c", "d", "a"}, 4);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, (std::vector<int>{2, 1, 0}));
}

TEST(Slots, RemovedNamesAreNotReusedWhileFreeSlotsRemain) {
  // "b" was at slot 1 and is gone; "x" takes the never-named slot 3 first.
  auto s = dp::assign_slots({"a", "b", "c", ""}, {"a", "c", "x"}, 4);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, (std::vector<int>{0, 2, 3}));
}

TEST(Slots, ReservedSlotsAreSkippedAndExhaustionIsAnError) {
  auto s = dp::assign_slots({}, {"a", "b"}, 3, {0});
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, (std::vector<int>{1, 2}));
  EXPECT_FALSE(dp::assign_slots({}, {"a", "b", "c"}, 3, {0}));
}

TEST(Encode, PortsMatchEitherDirectionByDefault) {
  auto p = lab_policy();
  std::vector<int> cs{0, 1, 2, 3, 4}, rs{0, 1};
  auto e = dp::encode_policy(p, cs, rs);
  ASSERT_EQ(e.ports.size(), static_cast<size_t>(DP_PORT_SPACE));
  // expert-dispatch (slot 0) tcp+udp 50000-50999
  EXPECT_EQ(e.ports[50000].cls[DP_PORT_TCP_DST], 0);
  EXPECT_EQ(e.ports[50999].cls[DP_PORT_TCP_SRC], 0);
  EXPECT_EQ(e.ports[50500].cls[DP_PORT_UDP_DST], 0);
  // param-sync (slot 2) is TCP only
  EXPECT_EQ(e.ports[52000].cls[DP_PORT_TCP_DST], 2);
  EXPECT_EQ(e.ports[52000].cls[DP_PORT_UDP_DST], DP_CLASS_NONE);
  // outside every range
  EXPECT_EQ(e.ports[49999].cls[DP_PORT_TCP_DST], DP_CLASS_NONE);
  EXPECT_EQ(e.ports[53100].cls[DP_PORT_TCP_SRC], DP_CLASS_NONE);
  ASSERT_EQ(e.marks.size(), 3u);
  EXPECT_EQ(e.marks[0], (std::pair<uint32_t, uint8_t>{0x54, 4}));
  // the paths' fwmarks: a socket that asked for a path is not steered
  EXPECT_EQ(e.marks[1], (std::pair<uint32_t, uint8_t>{0x100, DP_CLASS_NONE}));
  EXPECT_EQ(e.marks[2], (std::pair<uint32_t, uint8_t>{0x101, DP_CLASS_NONE}));
  EXPECT_EQ(e.default_class, static_cast<uint32_t>(DP_CLASS_NONE));
}

TEST(Encode, SrcAndDstMatchFillOneSlotEach) {
  auto p = lab_policy();
  p.classes[0].match = dp::PortMatch::Dst;
  p.classes[1].match = dp::PortMatch::Src;
  p.default_class = "logs";
  auto e = dp::encode_policy(p, {3, 5, 6, 7, 8}, {0, 1});
  EXPECT_EQ(e.ports[50010].cls[DP_PORT_TCP_DST], 3);
  EXPECT_EQ(e.ports[50010].cls[DP_PORT_TCP_SRC], DP_CLASS_NONE);
  EXPECT_EQ(e.ports[51010].cls[DP_PORT_TCP_DST], DP_CLASS_NONE);
  EXPECT_EQ(e.ports[51010].cls[DP_PORT_TCP_SRC], 5);
  EXPECT_EQ(e.default_class, 8u);
}

TEST(Encode, DecisionPutsTheWholeShareOnOneRail) {
  auto d = dp::decision_all_on(1, true, 7);
  EXPECT_EQ(d.share[0], 0);
  EXPECT_EQ(d.share[1], DP_SHARE_SCALE);
  EXPECT_EQ(d.flags & DP_DECISION_F_PINNED, static_cast<uint32_t>(DP_DECISION_F_PINNED));
  EXPECT_EQ(d.version, 7u);
  EXPECT_EQ(dp::decision_single_rail(d), 1);
  dp_decision split{};
  split.share[0] = 6000;
  split.share[1] = 4000;
  EXPECT_FALSE(dp::decision_single_rail(split));
}

TEST(Encode, RailCarriesGatewaysInNetworkOrder) {
  auto p = lab_policy();
  auto r = dp::encode_rail(p.paths[1], 42, true);
  EXPECT_EQ(r.ifindex, 42u);
  EXPECT_EQ(r.flags, static_cast<uint32_t>(DP_RAIL_F_ENABLED | DP_RAIL_F_GW4 | DP_RAIL_F_GW6));
  EXPECT_EQ(r.gw4, inet_addr("10.98.1.2"));
  in6_addr want{};
  inet_pton(AF_INET6, "fd98:1::2", &want);
  EXPECT_EQ(std::memcmp(r.gw6, &want, 16), 0);
  EXPECT_EQ(dp::encode_rail(p.paths[1], 0, true).flags & DP_RAIL_F_ENABLED, 0u)
      << "a rail without an ifindex is never a redirect target";
}

TEST(Encode, RailIsUpForMultipathAnswersOnlyInTheSharedTopologyWithAMultipathClass) {
  auto p = lab_policy();
  EXPECT_EQ(dp::encode_rail(p.paths[1], 42, true).flags & DP_RAIL_F_MP_UP, 0u);
  EXPECT_NE(
      dp::encode_rail(p.paths[1], 42, true, dp::Topology::Shared, true).flags & DP_RAIL_F_MP_UP,
      0u);
  EXPECT_EQ(dp::encode_rail(p.paths[1], 42, true, dp::Topology::Separate, true).flags &
                (DP_RAIL_F_MP_UP | DP_RAIL_F_ENABLED),
            0u)
      << "the separate topology places connections, it never redirects";
  EXPECT_EQ(
      dp::encode_rail(p.paths[1], 42, false, dp::Topology::Shared, true).flags & DP_RAIL_F_MP_UP,
      0u);
}

TEST(Encode, RailPacesSubflowsAtItsCapacityWhereTheOptionHoldsIt) {
  auto p = lab_policy();
  auto path = p.paths[1];
  path.capacity_bps = 250'000'000;
  EXPECT_EQ(dp::encode_rail(path, 42, true).subflow_pace, 31'250'000u) << "bytes per second";
  path.capacity_bps = 25'000'000'000;
  EXPECT_EQ(dp::encode_rail(path, 42, true).subflow_pace, 3'125'000'000u);
  // SO_MAX_PACING_RATE from BPF is 32 bits, and all ones means no cap
  path.capacity_bps = 8ull * UINT32_MAX;
  EXPECT_EQ(dp::encode_rail(path, 42, true).subflow_pace, 0u);
  path.capacity_bps = 200'000'000'000;
  EXPECT_EQ(dp::encode_rail(path, 42, true).subflow_pace, 0u) << "not capped below the rail's rate";
  path.capacity_bps = 0;
  EXPECT_EQ(dp::encode_rail(path, 42, true).subflow_pace, 0u);
}

TEST(Encode, SlotNamesRoundTripAndTruncate) {
  EXPECT_EQ(dp::decode_name(dp::encode_name("expert-dispatch")), "expert-dispatch");
  std::string longname(40, 'x');
  EXPECT_EQ(dp::decode_name(dp::encode_name(longname)).size(), DP_NAME_LEN - 1u);
}

TEST(AbiLayout, StructSizesAreStable) {
  // Pinned maps are adopted across restarts: a size change must be deliberate.
  EXPECT_EQ(sizeof(dp_port_entry), 4u);
  EXPECT_EQ(sizeof(dp_mark_key), 8u);
  EXPECT_EQ(sizeof(dp_mark_bits), 8u);
  EXPECT_EQ(sizeof(dp_config), 24u);
  EXPECT_EQ(sizeof(dp_rail), 32u);  // layout 4: subflow_pace
  EXPECT_EQ(sizeof(dp_decision), 16u);
  EXPECT_EQ(sizeof(dp_flow_key), 40u);
  EXPECT_EQ(sizeof(dp_counters), 72u);
  EXPECT_EQ(sizeof(dp_flow), 88u);  // layout 3: burst_bytes, last_burst
  EXPECT_EQ(sizeof(dp_plan), 12u);  // layout 7: flags
  EXPECT_EQ(sizeof(dp_cell_cfg), 28u);
  EXPECT_EQ(sizeof(dp_tcp_stats), 296u);
}

// SPDX-License-Identifier: Apache-2.0
// The plugin's pure parts: the class a request is placed in (the order
// NCCL_DUALPATH_CLASS, traffic class, operation, the process's cgroup, the
// policy's default), the shares it gets, the [nccl] mapping read from a
// policy's text, and the settings' checks.
#include <gtest/gtest.h>
#include <stdlib.h>

#include "daemon_view.h"
#include "dualpath/nccl/net.h"
#include "settings.h"

namespace {

using namespace dpnccl;

std::vector<Rail> two_rails() {
  std::vector<Rail> r(2);
  r[0].name = "rail0";
  r[0].capacity_bps = 1'000'000'000;
  r[1].name = "rail1";
  r[1].capacity_bps = 250'000'000;
  return r;
}

DaemonSnapshot snapshot() {
  DaemonSnapshot s;
  s.paths = {{"rail0", "eth0", "up", 1'000'000'000, 0x100},
             {"rail1", "eth1", "up", 250'000'000, 0x101}};
  s.classes = {{"expert-dispatch", {{"rail0", 70.0}, {"rail1", 30.0}}, {}},
               {"param-sync", {{"rail0", 0.0}, {"rail1", 100.0}}, {}},
               {"kv-transfer", {{"rail0", 100.0}, {"rail1", 0.0}}, {"/dualpath.slice/kv"}},
               {"bulk", {{"rail0", 50.0}, {"rail1", 50.0}}, {}}};
  s.traffic_classes = {{3, "param-sync"}};
  s.operations = {{"alltoall", "expert-dispatch"}, {"allreduce", "param-sync"}};
  s.default_class = "bulk";
  return s;
}

constexpr uint32_t kUndef = static_cast<uint32_t>(NCCL_NET_ATTR_UNDEF);
// ncclNetAttr.op as NCCL sets it before a transfer: the function's bit
constexpr uint32_t bit(ncclFunc_t f) { return 1u << f; }

}  // namespace

TEST(NcclPlacement, WithoutDaemonSharesFollowCapacity) {
  auto p = place(nullptr, "", NCCL_NET_TRAFFIC_CLASS_UNDEF, kUndef, "", two_rails());
  EXPECT_EQ(p.klass, "");
  EXPECT_DOUBLE_EQ(p.share[0], 0.8);
  EXPECT_DOUBLE_EQ(p.share[1], 0.2);
  auto unknown = two_rails();
  unknown[1].capacity_bps = 0;
  auto q = place(nullptr, "", NCCL_NET_TRAFFIC_CLASS_UNDEF, kUndef, "", unknown);
  EXPECT_DOUBLE_EQ(q.share[0], 0.5);
  EXPECT_NE(q.why.find("equal"), std::string::npos);
}

TEST(NcclPlacement, ClassOrder) {
  auto s = snapshot();
  auto rails = two_rails();
  // the environment first
  auto p = place(&s, "kv-transfer", 3, bit(ncclFuncAlltoAll), "", rails);
  EXPECT_EQ(p.klass, "kv-transfer");
  EXPECT_EQ(p.why, "NCCL_DUALPATH_CLASS");
  // then the communicator's traffic class
  p = place(&s, "", 3, bit(ncclFuncAlltoAll), "", rails);
  EXPECT_EQ(p.klass, "param-sync");
  EXPECT_DOUBLE_EQ(p.share[1], 1.0);
  // then the operation
  p = place(&s, "", 7, bit(ncclFuncAlltoAll), "", rails);
  EXPECT_EQ(p.klass, "expert-dispatch");
  EXPECT_EQ(p.why, "operation alltoall");
  EXPECT_NEAR(p.share[0], 0.7, 1e-9);
  // then the process's cgroup (below the class's directory)
  p = place(&s, "", NCCL_NET_TRAFFIC_CLASS_UNDEF, bit(ncclFuncBroadcast),
            "/dualpath.slice/kv/job-1", rails);
  EXPECT_EQ(p.klass, "kv-transfer");
  // not a sibling whose name only starts the same
  p = place(&s, "", NCCL_NET_TRAFFIC_CLASS_UNDEF, kUndef, "/dualpath.slice/kvx", rails);
  EXPECT_EQ(p.klass, "bulk");
  EXPECT_EQ(p.why, "the policy's default class");
  // send and receive are one operation, sendrecv
  s.operations["sendrecv"] = "kv-transfer";
  EXPECT_EQ(place(&s, "", -1, bit(ncclFuncSend), "", rails).klass, "kv-transfer");
}

// NCCL's op is a mask (net.cc: netAttr.op = BIT(collAPI)): AllGather's bit
// is 4, which read as a function number would be AllReduce.
TEST(NcclPlacement, TheOperationIsReadFromItsBit) {
  EXPECT_EQ(operation_name(bit(ncclFuncAllGather)), "allgather");
  EXPECT_EQ(operation_name(bit(ncclFuncAllReduce)), "allreduce");
  EXPECT_EQ(operation_name(bit(ncclFuncReduceScatter)), "reducescatter");
  EXPECT_EQ(operation_name(bit(ncclFuncBroadcast)), "broadcast");
  EXPECT_EQ(operation_name(bit(ncclFuncReduce)), "reduce");
  EXPECT_EQ(operation_name(bit(ncclFuncAlltoAll)), "alltoall");
  EXPECT_EQ(operation_name(bit(ncclFuncAllGatherV)), "allgather");
  EXPECT_EQ(operation_name(bit(ncclFuncSend)), "sendrecv");
  EXPECT_EQ(operation_name(bit(ncclFuncRecv)), "sendrecv");
  // at connect, a point-to-point connection's functions together: none
  EXPECT_EQ(operation_name(bit(ncclFuncSend) | bit(ncclFuncRecv) | bit(ncclFuncAlltoAll) |
                           bit(ncclFuncScatter) | bit(ncclFuncGather)),
            "");
  EXPECT_EQ(operation_name(kUndef), "");
  EXPECT_EQ(operation_name(0), "");
  EXPECT_EQ(operation_name(bit(ncclFuncScatter)), "");
}

TEST(NcclPlacement, ARailDownGetsNoShare) {
  auto s = snapshot();
  s.paths[0].state = "down";
  auto p = place(&s, "expert-dispatch", -1, kUndef, "", two_rails());
  EXPECT_FALSE(p.up[0]);
  EXPECT_DOUBLE_EQ(p.share[0], 0.0);
  EXPECT_DOUBLE_EQ(p.share[1], 1.0);
  // a class whose only rail is down: the rails that are up, by capacity
  s.paths[0].state = "up";
  s.paths[1].state = "down";
  p = place(&s, "param-sync", -1, kUndef, "", two_rails());
  EXPECT_DOUBLE_EQ(p.share[0], 1.0);
}

TEST(NcclPlacement, PolicyTextMapping) {
  DaemonSnapshot s;
  parse_policy_nccl(R"([node]
name = "n1"
default_class = "bulk"   # the rest

[nccl]
traffic_class.3 = "param-sync"
operation.alltoall = "expert-dispatch"  # EP
"operation"."allgather" = 'param-sync'
traffic_class = { 5 = "kv-transfer", 6 = "bulk" }

[nccl.operation]
sendrecv = "kv-transfer"

[[class]]
name = "x"
operation.allreduce = "not-nccl"
)",
                    &s);
  EXPECT_EQ(s.default_class, "bulk");
  EXPECT_EQ(s.traffic_classes.at(3), "param-sync");
  EXPECT_EQ(s.traffic_classes.at(5), "kv-transfer");
  EXPECT_EQ(s.traffic_classes.at(6), "bulk");
  EXPECT_EQ(s.operations.at("alltoall"), "expert-dispatch");
  EXPECT_EQ(s.operations.at("allgather"), "param-sync");
  EXPECT_EQ(s.operations.at("sendrecv"), "kv-transfer");
  EXPECT_EQ(s.operations.count("allreduce"), 0u);
}

TEST(NcclSettings, WrongValuesAreRefusedWithTheVariable) {
  Settings st;
  std::string error;
  ::setenv("NCCL_DUALPATH_STALL_MS", "5", 1);
  EXPECT_FALSE(load_settings(&st, &error));
  EXPECT_NE(error.find("NCCL_DUALPATH_STALL_MS=\"5\""), std::string::npos) << error;
  ::unsetenv("NCCL_DUALPATH_STALL_MS");
  ::setenv("NCCL_DUALPATH_SPREAD", "maybe", 1);
  EXPECT_FALSE(load_settings(&st, &error));
  EXPECT_NE(error.find("NCCL_DUALPATH_SPREAD"), std::string::npos) << error;
  ::unsetenv("NCCL_DUALPATH_SPREAD");
  st = Settings{};
  EXPECT_TRUE(load_settings(&st, &error)) << error;
  EXPECT_EQ(st.stall_ms, 100);
}

TEST(NcclSettings, Rates) {
  EXPECT_EQ(parse_rate("1Gbit"), 1'000'000'000u);
  EXPECT_EQ(parse_rate("250mbit"), 250'000'000u);
  EXPECT_EQ(parse_rate("100G"), 100'000'000'000u);
  EXPECT_FALSE(parse_rate("fast"));
  EXPECT_FALSE(parse_rate("10furlongs"));
}

TEST(NcclSettings, RailsFromTheEnvironment) {
  Settings st;
  std::string error;
  std::vector<Rail> rails;
  st.rails_env = "lo=127.0.0.1@1Gbit,lo=127.0.0.2";
  ASSERT_TRUE(rails_from_env(st, &rails, &error)) << error;
  ASSERT_EQ(rails.size(), 2u);
  EXPECT_NE(rails[0].name, rails[1].name);
  EXPECT_NE(rails[0].guid, rails[1].guid);
  EXPECT_EQ(rails[0].capacity_bps, 1'000'000'000u);
  st.rails_env = "dp-no-such-if";
  EXPECT_FALSE(rails_from_env(st, &rails, &error));
  EXPECT_NE(error.find("no interface named \"dp-no-such-if\""), std::string::npos) << error;
  st.rails_env = "lo=not-an-address";
  EXPECT_FALSE(rails_from_env(st, &rails, &error));
}

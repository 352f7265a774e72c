// SPDX-License-Identifier: Apache-2.0
// dpctl env's settings (core/launch_env.h) from the RDMA fixture tree
// (tests/fixtures/sysfs-infiniband: mlx5_0 port 1 on eth2, mlx5_1 on eth3,
// GID 1 of each a RoCE v2 GID), and the cgroup names of dpctl run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "dualpath/core/launch_env.h"
#include "dualpath/kernel/cgroups.h"
#include "dualpath/kernel/node_checks.h"
#include "dualpath/kernel/rdma.h"

namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(DP_FIXTURE_DIR) + "/sysfs-infiniband";

dp::EnvRail rail_of(const std::string& path, const std::string& ifname, double share) {
  dp::EnvRail r{path, ifname, share, {}};
  auto ports = dp::discover_rdma_sysfs(kFixture);
  EXPECT_TRUE(ports);
  for (auto& p : *ports)
    if (p.netdev == ifname)
      r.rdma.push_back({p.device, p.port, dp::roce_v2_gid_index(kFixture, p)});
  return r;
}

}  // namespace

TEST(LaunchEnv, RoceV2GidIndexOfTheFixture) {
  EXPECT_EQ(dp::roce_v2_gid_index(kFixture, {"mlx5_0", 1, "eth2"}), 1) << "types/1 is RoCE v2";
  EXPECT_EQ(dp::roce_v2_gid_index(kFixture, {"mlx5_0", 1, "eth9"}), std::nullopt)
      << "no GID of that netdev";
  EXPECT_EQ(dp::roce_v2_gid_index(kFixture, {"ib_0", 1, ""}), std::nullopt) << "InfiniBand";
}

TEST(LaunchEnv, OneRailWithRdma) {
  auto env = dp::launch_env("param-sync", 10, {rail_of("rail1", "eth3", 100)});
  ASSERT_TRUE(env) << env.error().what();
  const auto& e = (*env)["env"];
  EXPECT_EQ(e["NCCL_IB_HCA"], "=mlx5_1:1") << "'=': exact names, not prefixes";
  EXPECT_EQ(e["NCCL_SOCKET_IFNAME"], "=eth3");
  EXPECT_EQ(e["NCCL_IB_GID_INDEX"], "1");
  EXPECT_EQ(e["NCCL_IB_TC"], "40") << "DSCP 10 (AF11) in the traffic class byte";
  EXPECT_EQ(e["UCX_NET_DEVICES"], "mlx5_1:1,eth3");
  EXPECT_EQ(e["UCX_IB_TRAFFIC_CLASS"], "40");
  EXPECT_EQ(e["UCX_IB_GID_INDEX"], "1");
  EXPECT_EQ((*env)["rails"][0]["rdma_device"], "mlx5_1");
  EXPECT_EQ(dp::env_as_shell(e).find("export NCCL_IB_HCA='=mlx5_1:1'\n") != std::string::npos,
            true);
}

TEST(LaunchEnv, SplitClassListsBothRailsLargestShareFirst) {
  auto env = dp::launch_env("combine", std::nullopt,
                            {rail_of("rail0", "eth2", 70), rail_of("rail1", "eth3", 30)});
  ASSERT_TRUE(env) << env.error().what();
  EXPECT_EQ((*env)["env"]["NCCL_IB_HCA"], "=mlx5_0:1,mlx5_1:1");
  EXPECT_EQ((*env)["env"]["NCCL_SOCKET_IFNAME"], "=eth2,eth3");
  EXPECT_FALSE((*env)["env"].contains("NCCL_IB_TC")) << "no dscp, no traffic class";
  EXPECT_NE((*env)["notes"].dump().find("split over 2 rails"), std::string::npos);
}

TEST(LaunchEnv, RefusesARailWithoutRdma) {
  auto env = dp::launch_env("param-sync", 10, {rail_of("rail0", "veth7", 100)});
  ASSERT_FALSE(env);
  EXPECT_NE(env.error().what().find("path rail0 (interface veth7) of class param-sync has no RDMA "
                                    "device"),
            std::string::npos)
      << env.error().what();
  EXPECT_FALSE(dp::launch_env("x", 10, {}));
}

TEST(LaunchEnv, ShellQuotingSurvivesAQuote) {
  EXPECT_EQ(dp::env_as_shell(dp::json{{"A", "it's"}}), "export A='it'\\''s'\n");
}

TEST(RunSlice, NamesAsSystemdNestsThem) {
  EXPECT_EQ(dp::systemd_escape("param-sync"), "param\\x2dsync");
  auto s = dp::run_slice("dpl-a", "param-sync");
  EXPECT_EQ(s.unit, "dualpath-dpl\\x2da-param\\x2dsync.slice");
  EXPECT_EQ(s.dir,
            "/dualpath.slice/dualpath-dpl\\x2da.slice/dualpath-dpl\\x2da-param\\x2dsync.slice");
}

TEST(RunSlice, FindsAUnitsDirectoryByName) {
  fs::path root = fs::temp_directory_path() / ("dp-units-" + std::to_string(getpid()));
  fs::create_directories(root / "system.slice" / "vllm.service");
  fs::create_directories(root / "user.slice" / "user-1000.slice" / "app.slice" / "x.service");
  EXPECT_EQ(dp::find_unit_cgroup(root, "vllm.service"), "/system.slice/vllm.service");
  EXPECT_EQ(dp::find_unit_cgroup(root, "x.service"),
            "/user.slice/user-1000.slice/app.slice/x.service");
  EXPECT_EQ(dp::find_unit_cgroup(root, "x.service", 2), std::nullopt) << "deeper than allowed";
  EXPECT_EQ(dp::find_unit_cgroup(root, "gone.service"), std::nullopt);

  // a policy naming the unit: found by search, then where it was found
  auto load = dp::parse_policy(R"([node]
name = "n"
[[path]]
name = "r0"
interface = "eth0"
gateway = "10.0.0.1"
capacity = "1Gbit"
table = 100
fwmark = 0x100
[[class]]
name = "c"
kind = "elastic"
prefer = "r0"
units = ["x.service"]
)",
                               "p.toml");
  ASSERT_TRUE(load.ok()) << load.errors[0].str();
  auto first = dp::resolve_cgroups(*load.policy, root.string());
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].dir, "/user.slice/user-1000.slice/app.slice/x.service");
  EXPECT_EQ(first[0].id, 0u) << "not a cgroup v2 filesystem: no id";
  // the unit restarted elsewhere: the old place is gone, so the tree is searched
  fs::remove_all(root / "user.slice");
  fs::create_directories(root / "system.slice" / "x.service");
  auto again = dp::resolve_cgroups(*load.policy, root.string(), first);
  EXPECT_EQ(again[0].dir, "/system.slice/x.service");
  fs::remove_all(root);
}

// The kernel dualpathd refuses to start on, with what it needs.
TEST(Kernel, TooOldOrWithoutBtfIsRefusedWithWhatItNeeds) {
  EXPECT_EQ(dp::kernel_problem("6.1.0-13-amd64", true), "");
  EXPECT_EQ(dp::kernel_problem("5.18.0", true), "");
  EXPECT_NE(dp::kernel_problem("5.15.0-91-generic", true).find("needs Linux 5.18 or later"),
            std::string::npos);
  EXPECT_NE(dp::kernel_problem("4.19.0", true).find("needs Linux 5.18"), std::string::npos);
  EXPECT_NE(dp::kernel_problem("6.8.0", false).find("CONFIG_DEBUG_INFO_BTF"), std::string::npos);
  EXPECT_NE(dp::kernel_problem("weird", true).find("cannot read"), std::string::npos);
}

// One reading of uname's release serves the start check and the iterator's
// kernel check (Linux 6.5, datapath.cpp).
TEST(Kernel, VersionIsReadFromTheRelease) {
  EXPECT_EQ(dp::kernel_version("6.1.0-13-amd64"), std::pair(6, 1));
  EXPECT_EQ(dp::kernel_version("6.18.2+deb13-amd64"), std::pair(6, 18));
  EXPECT_EQ(dp::kernel_version("5.4"), std::pair(5, 4));
  EXPECT_EQ(dp::kernel_version("6"), std::nullopt);
  EXPECT_EQ(dp::kernel_version("weird"), std::nullopt);
}

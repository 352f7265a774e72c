// SPDX-License-Identifier: Apache-2.0
// RDMA discovery and counters from a fixture tree laid out as the kernel lays
// out /sys/class/infiniband (tests/fixtures/sysfs-infiniband).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dualpath/kernel/rdma.h"

namespace fs = std::filesystem;

namespace {

const std::string kFixture = std::string(DP_FIXTURE_DIR) + "/sysfs-infiniband";

// A private copy, so a test may change or remove devices.
struct TempTree {
  fs::path dir = fs::temp_directory_path() / ("dp-rdma-" + std::to_string(getpid()));
  TempTree() {
    fs::remove_all(dir);
    fs::copy(kFixture, dir, fs::copy_options::recursive);
  }
  ~TempTree() { fs::remove_all(dir); }
  void write(const std::string& rel, const std::string& value) {
    std::ofstream(dir / rel) << value << "\n";
  }
};

}  // namespace

TEST(Rdma, DiscoversPortsAndTheirNetdevs) {
  auto ports = dp::discover_rdma_sysfs(kFixture);
  ASSERT_TRUE(ports) << ports.error().str();
  ASSERT_EQ(ports->size(), 3u);
  EXPECT_EQ((*ports)[0], (dp::RdmaPort{"ib_0", 1, ""})) << "InfiniBand: no netdev";
  EXPECT_EQ((*ports)[1], (dp::RdmaPort{"mlx5_0", 1, "eth2"}));
  EXPECT_EQ((*ports)[2], (dp::RdmaPort{"mlx5_1", 1, "eth3"}));
}

TEST(Rdma, NoRdmaSubsystemMeansNoDevicesNotAnError) {
  auto ports = dp::discover_rdma_sysfs("/nonexistent/sys/class/infiniband");
  ASSERT_TRUE(ports);
  EXPECT_TRUE(ports->empty());
}

TEST(Rdma, DataCountersAreScaledFromFourByteWords) {
  auto c = dp::read_rdma_counters(kFixture, {"mlx5_0", 1, "eth2"});
  ASSERT_TRUE(c) << c.error().str();
  EXPECT_EQ(c->tx_bytes, 4'000'000u);  // port_xmit_data 1000000 words
  EXPECT_EQ(c->rx_bytes, 8'000'000u);
  EXPECT_EQ(c->tx_packets, 5000u);
  EXPECT_EQ(c->rx_packets, 6000u);
}

TEST(Rdma, CongestionAndErrorCountersAreRead) {
  auto c = dp::read_rdma_counters(kFixture, {"mlx5_1", 1, "eth3"});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->cnp_sent, 11u);
  EXPECT_EQ(c->cnp_handled, 12u);
  EXPECT_EQ(c->ecn_marked, 13u);
  EXPECT_EQ(c->out_of_sequence, 14u);
  EXPECT_EQ(c->seq_errors, 15u);
  EXPECT_EQ(c->local_ack_timeouts, 16u);
}

TEST(Rdma, MissingHardwareCountersReadAsZero) {
  auto c = dp::read_rdma_counters(kFixture, {"ib_0", 1, ""});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->tx_bytes, 28u);
  EXPECT_EQ(c->cnp_sent, 0u);
}

TEST(Rdma, ADeviceThatDisappearsBetweenReadsIsAnErrorNotACrash) {
  TempTree t;
  dp::RdmaPort p{"mlx5_1", 1, "eth3"};
  ASSERT_TRUE(dp::read_rdma_counters(t.dir, p));
  fs::remove_all(t.dir / "mlx5_1");  // the driver unbound the device
  auto c = dp::read_rdma_counters(t.dir, p);
  ASSERT_FALSE(c);
  EXPECT_EQ(c.error().code, ENOENT);
  auto ports = dp::discover_rdma_sysfs(t.dir);
  ASSERT_TRUE(ports);
  EXPECT_EQ(ports->size(), 2u) << "rediscovery no longer lists it";
}

TEST(Rdma, CountersSumAcrossPortsOfARail) {
  TempTree t;
  t.write("mlx5_0/ports/1/counters/port_xmit_data", "250");
  dp::RdmaCounters sum;
  auto ports = dp::discover_rdma_sysfs(t.dir);
  ASSERT_TRUE(ports);
  for (auto& p : *ports) {
    auto c = dp::read_rdma_counters(t.dir, p);
    ASSERT_TRUE(c);
    dp::add_rdma(sum, *c);
  }
  EXPECT_EQ(sum.tx_bytes, 250u * 4 + 10 * 4 + 7 * 4);
  EXPECT_EQ(sum.cnp_sent, 22u);
}

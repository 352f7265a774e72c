// SPDX-License-Identifier: Apache-2.0
// /proc/stat as kernel/procfs.h reads it: per CPU or the machine's sum, busy
// without idle and iowait.
#include <gtest/gtest.h>

#include "dualpath/kernel/procfs.h"

namespace {

const char* kStat =
    "cpu  100 0 100 700 100 0 0 0 0 0\n"
    "cpu0 50 0 50 300 100 0 0 0 0 0\n"
    "cpu1 50 0 50 400 0 0 0 0 0 0\n"
    "intr 12345\n";

TEST(Procfs, CpuTimesPerCpuOrTheSum) {
  auto per = dp::parse_cpu_times(kStat);
  ASSERT_EQ(per.size(), 2u);
  EXPECT_EQ(per[0].busy, 100u);
  EXPECT_EQ(per[0].total, 500u);
  EXPECT_EQ(per[1].total, 500u);
  auto all = dp::parse_cpu_times(kStat, true);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].busy, 200u);
  EXPECT_EQ(all[0].total, 1000u);
}

TEST(Procfs, BusyIsTheShareOfTimeBetweenTwoReadings) {
  std::vector<dp::CpuTime> a{{100, 500}, {100, 500}}, b{{190, 600}, {100, 600}};
  auto busy = dp::cpu_busy(a, b);
  ASSERT_EQ(busy.size(), 2u);
  EXPECT_DOUBLE_EQ(busy[0], 0.9);
  EXPECT_DOUBLE_EQ(busy[1], 0.0);
  EXPECT_EQ(dp::cpu_times().size(), dp::cpu_times().size());  // reads this machine's
  EXPECT_FALSE(dp::cpu_times(true).empty());
}

// /proc/net/netstat as Linux 6.18 writes it (TcpExt cut short; the
// MPTcpExt header's first names as they are, values made up)
TEST(Procfs, MptcpFallbacksAreBothFallbackCountersOfMptcpExt) {
  const std::string netstat =
      "TcpExt: SyncookiesSent SyncookiesRecv\n"
      "TcpExt: 7 9\n"
      "MPTcpExt: MPCapableSYNRX MPCapableSYNTX MPCapableSYNACKRX MPCapableACKRX "
      "MPCapableFallbackACK MPCapableFallbackSYNACK MPCapableSYNTXDrop\n"
      "MPTcpExt: 11 12 13 14 2 3 15\n";
  EXPECT_EQ(dp::parse_mptcp_fallbacks(netstat), 5u);
  EXPECT_EQ(dp::parse_mptcp_fallbacks("TcpExt: SyncookiesSent\nTcpExt: 7\n"), 0u)
      << "a kernel without MPTCP has no MPTcpExt";
  EXPECT_EQ(dp::mptcp_fallbacks(), dp::mptcp_fallbacks());  // reads this machine's
}

// sysctl(8) reads a dot as the next level: a VLAN's name is written with "/"
TEST(Procfs, AnInterfacesNameInASysctlKeyHasItsDotsAsSlashes) {
  EXPECT_EQ(dp::sysctl_ifname("eth1.100"), "eth1/100");
  EXPECT_EQ(dp::sysctl_ifname("ens1f0np0"), "ens1f0np0");
}

}  // namespace

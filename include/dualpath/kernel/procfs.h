// SPDX-License-Identifier: Apache-2.0
// What the node's /proc says, read in one place: CPU time (/proc/stat), the
// ephemeral port range (net.ipv4.ip_local_port_range and
// ip_local_reserved_ports) and MPTCP's fallbacks (/proc/net/netstat). The parsing is pure
// (core/policy.h parse_ephemeral_ports, cpu_busy here) and tested without a /proc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dualpath/core/policy.h"

namespace dp {

// One CPU's jiffies (the whole machine's for /proc/stat's "cpu" line).
struct CpuTime {
  uint64_t busy = 0;  // everything but idle and iowait
  uint64_t total = 0;
};

// Each CPU's time from /proc/stat's text ("cpu0 ..." lines); `all` takes
// the first line (the machine's sum) alone.
std::vector<CpuTime> parse_cpu_times(const std::string& proc_stat, bool all = false);
// The node's CPUs now (or the machine's sum).
std::vector<CpuTime> cpu_times(bool all = false);
// The busy fraction of each CPU between two readings.
std::vector<double> cpu_busy(const std::vector<CpuTime>& before, const std::vector<CpuTime>& after);

// An interface's name as it goes in a sysctl(8) key: a dot in it is written
// "/" ("net.ipv4.conf.eth1/100.rp_filter" for eth1.100), as sysctl reads a
// dot as the next level.
inline std::string sysctl_ifname(std::string ifname) {
  for (auto& c : ifname)
    if (c == '.') c = '/';
  return ifname;
}

// The node's ephemeral port range and reserved ports now.
EphemeralPorts read_ephemeral_ports();

// Connections that asked for MPTCP and fell back to TCP, from the text of
// /proc/net/netstat (MPTcpExt MPCapableFallbackSYNACK, where the peer
// answered without MPTCP, and MPCapableFallbackACK, where a peer's SYN
// carried MPTCP and its handshake did not finish with it); every MPTCP socket
// of the network namespace, since it was made.
uint64_t parse_mptcp_fallbacks(const std::string& proc_net_netstat);
uint64_t mptcp_fallbacks();

// net.ipv4.tcp_retries2 of this network namespace (15 when unreadable).
int tcp_retries2();

}  // namespace dp

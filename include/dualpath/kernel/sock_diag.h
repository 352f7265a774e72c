// SPDX-License-Identifier: Apache-2.0
// The node's TCP sockets over sock_diag (as `ss -tni`), one dump for every
// reader: dpctl diagnose (which side of a slow connection is waiting, from
// tcp_info) and the daemon's ending of a failed rail's connections
// (SOCK_DESTROY, what `ss -K` does; the kernel needs
// CONFIG_INET_DIAG_DESTROY). Reads the network namespace it runs in.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"

namespace dp {

struct TcpSocketInfo {
  IpAddr src, dst;                // local and remote
  uint16_t sport = 0, dport = 0;  // host byte order
  uint32_t mark = 0;
  uint8_t state = 0;  // TCP_ESTABLISHED, ...
  uint64_t inode = 0, cookie = 0;
  uint32_t rqueue = 0;  // bytes received, not read by the application
  uint32_t wqueue = 0;  // bytes written, not yet acknowledged
  // tcp_info, cumulative since the socket began (microseconds); with_info only
  uint64_t busy_us = 0, rwnd_limited_us = 0, sndbuf_limited_us = 0;
  uint64_t bytes_acked = 0, bytes_received = 0;
  uint32_t total_retrans = 0, rtt_us = 0;
  // An MPTCP subflow's connection, by this end's token (the path manager's
  // events name connections so); 0: not a subflow. with_info only.
  uint32_t mptcp_token = 0;
  std::array<uint8_t, 48> id{};  // the kernel's inet_diag_sockid, for SOCK_DESTROY
};

// A bit per TCP state (1 << TCP_ESTABLISHED, ...).
inline constexpr uint32_t kTcpAllButListen = ~(1u << 10);  // TCP_LISTEN
// Everything worth ending: all but LISTEN, TIME_WAIT and CLOSE.
inline constexpr uint32_t kTcpEndable =
    (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 8) | (1u << 9) | (1u << 11);

// Every TCP socket of both families in `states`, with tcp_info when asked.
Result<std::vector<TcpSocketInfo>> tcp_sockets(uint32_t states = kTcpAllButListen,
                                               bool with_info = true);

// Ends every established or connecting TCP socket whose local address is one
// of `locals` and that `want` accepts (given tcp_info and the MPTCP token
// when with_info). Returns the sockets it ended.
Result<std::vector<TcpSocketInfo>> destroy_tcp(
    const std::vector<IpAddr>& locals, const std::function<bool(const TcpSocketInfo&)>& want,
    bool with_info = false);

// Fills the tcp_info fields of `s` from the kernel's struct tcp_info (which
// may be shorter, from an older kernel, or longer). In its own file: the
// kernel's header and glibc's (which libnl includes) both define tcp_info.
void decode_tcp_info(const void* data, size_t len, TcpSocketInfo& s);

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
// The node's TCP sockets with their tcp_info (sock_diag, as `ss -tni`), for
// dpctl diagnose: which side of a slow connection is waiting. Reads the
// network namespace dpctl runs in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"

namespace dp {

struct TcpSocketInfo {
  IpAddr src, dst;
  uint16_t sport = 0, dport = 0;
  uint32_t mark = 0;
  uint8_t state = 0;  // TCP_ESTABLISHED, ...
  uint64_t inode = 0, cookie = 0;
  uint32_t rqueue = 0;  // bytes received, not read by the application
  uint32_t wqueue = 0;  // bytes written, not yet acknowledged
  // tcp_info, cumulative since the socket began (microseconds)
  uint64_t busy_us = 0, rwnd_limited_us = 0, sndbuf_limited_us = 0;
  uint64_t bytes_acked = 0, bytes_received = 0;
  uint32_t total_retrans = 0, rtt_us = 0;
};

// Fills the tcp_info fields of `s` from the kernel's struct tcp_info (which
// may be shorter, from an older kernel, or longer). In its own file: the
// kernel's header and glibc's (which libnl includes) both define tcp_info.
void decode_tcp_info(const void* data, size_t len, TcpSocketInfo& s);

// Every TCP socket of both families (listeners excluded).
Result<std::vector<TcpSocketInfo>> tcp_sockets();

}  // namespace dp

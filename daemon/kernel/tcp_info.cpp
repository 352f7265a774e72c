// SPDX-License-Identifier: Apache-2.0
// The kernel's struct tcp_info, apart from glibc's (see sock_diag.h).
#include <linux/tcp.h>

#include <algorithm>
#include <cstring>

#include "dualpath/kernel/sock_diag.h"

namespace dp {

void decode_tcp_info(const void* data, size_t len, TcpSocketInfo& s) {
  tcp_info ti{};
  std::memcpy(&ti, data, std::min(sizeof(ti), len));
  s.busy_us = ti.tcpi_busy_time;
  s.rwnd_limited_us = ti.tcpi_rwnd_limited;
  s.sndbuf_limited_us = ti.tcpi_sndbuf_limited;
  s.bytes_acked = ti.tcpi_bytes_acked;
  s.bytes_received = ti.tcpi_bytes_received;
  s.total_retrans = ti.tcpi_total_retrans;
  s.rtt_us = ti.tcpi_rtt;
}

}  // namespace dp

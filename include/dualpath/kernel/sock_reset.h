// SPDX-License-Identifier: Apache-2.0
// Ends TCP connections with SOCK_DESTROY over sock_diag (what `ss -K` does;
// the kernel needs CONFIG_INET_DIAG_DESTROY). In the separate topology a
// connection cannot move off a failed rail, and TCP would sit in its
// retransmission timeouts for minutes; ended, the application sees
// ECONNABORTED at once and its reconnect is placed on a rail that works.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"

namespace dp {

struct TcpSocket {
  IpAddr local, remote;
  uint16_t sport = 0, dport = 0;  // host byte order
  uint32_t mark = 0;
};

// Ends every established or connecting TCP socket of this network namespace
// whose local address is one of `locals` and that `want` accepts. Returns the
// sockets it ended.
Result<std::vector<TcpSocket>> destroy_tcp(const std::vector<IpAddr>& locals,
                                           const std::function<bool(const TcpSocket&)>& want);

}  // namespace dp

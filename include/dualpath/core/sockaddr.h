// SPDX-License-Identifier: Apache-2.0
// An IpAddr and a port as a socket address, and back: what the BFD sockets,
// the probe client and the responder hand to the socket calls.
#pragma once

#include <sys/socket.h>

#include <cstdint>

#include "dualpath/core/policy.h"

namespace dp {

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;
};
SockAddr sockaddr_of(const IpAddr& a, uint16_t port);
// A v4-mapped IPv6 address comes back as IPv4.
IpAddr address_of(const sockaddr_storage& ss);

}  // namespace dp

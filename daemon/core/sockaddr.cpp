// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/sockaddr.h"

#include <netinet/in.h>

#include <cstring>

namespace dp {

SockAddr sockaddr_of(const IpAddr& a, uint16_t port) {
  SockAddr s;
  if (a.family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&s.ss);
    in->sin_family = AF_INET;
    in->sin_port = htons(port);
    std::memcpy(&in->sin_addr, a.bytes.data(), 4);
    s.len = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&s.ss);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(port);
    std::memcpy(&in6->sin6_addr, a.bytes.data(), 16);
    s.len = sizeof(sockaddr_in6);
  }
  return s;
}

IpAddr address_of(const sockaddr_storage& ss) {
  IpAddr a;
  if (ss.ss_family == AF_INET) {
    a.family = AF_INET;
    std::memcpy(a.bytes.data(), &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, 4);
  } else if (ss.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&in6)) {
      a.family = AF_INET;
      std::memcpy(a.bytes.data(), in6.s6_addr + 12, 4);
    } else {
      a.family = AF_INET6;
      std::memcpy(a.bytes.data(), &in6, 16);
    }
  }
  return a;
}

}  // namespace dp

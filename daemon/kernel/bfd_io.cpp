// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/bfd_io.h"

#include "dualpath/core/sockaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "dualpath/abi.h"

namespace dp {
namespace {

IpAddr any_of(int family) {
  IpAddr a;
  a.family = family;
  return a;
}

Result<int> make_socket(const IpAddr& peer, const std::string& ifname) {
  int fd = ::socket(peer.family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP);
  if (fd < 0) return DP_SYS_ERROR(errno, "creating a BFD socket failed");
  int one = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, ifname.c_str(),
                   static_cast<socklen_t>(ifname.size())) < 0 ||
      ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0) {
    int e = errno;
    ::close(fd);
    return DP_SYS_ERROR(e, "binding a BFD socket to {} failed", ifname);
  }
  return fd;
}

}  // namespace

BfdEndpoint::~BfdEndpoint() {
  if (rx_ >= 0) ::close(rx_);
  if (tx_ >= 0) ::close(tx_);
}

Result<std::unique_ptr<BfdEndpoint>> BfdEndpoint::open(const std::string& ifname,
                                                       const IpAddr& peer, uint32_t mark,
                                                       bfd::Auth auth) {
  std::unique_ptr<BfdEndpoint> ep(new BfdEndpoint());
  ep->peer_ = peer;
  ep->auth_ = std::move(auth);
  ep->ifname_ = ifname;
  const bool v4 = peer.family == AF_INET;
  int one = 1, ttl = bfd::kTtl;

  auto rx = make_socket(peer, ifname);
  if (!rx) return rx.error();
  ep->rx_ = *rx;
  if (v4 ? ::setsockopt(ep->rx_, IPPROTO_IP, IP_RECVTTL, &one, sizeof(one))
         : ::setsockopt(ep->rx_, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, &one, sizeof(one)))
    return DP_SYS_ERROR(errno, "asking for the TTL of BFD packets on {} failed", ifname);
  if (!v4) (void)::setsockopt(ep->rx_, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  SockAddr local = sockaddr_of(any_of(peer.family), bfd::kPort);
  if (::bind(ep->rx_, reinterpret_cast<sockaddr*>(&local.ss), local.len) < 0)
    return DP_SYS_ERROR(errno, "binding UDP {} on {} for BFD failed", bfd::kPort, ifname);

  auto tx = make_socket(peer, ifname);
  if (!tx) return tx.error();
  ep->tx_ = *tx;
  int prio = 7;  // TC_PRIO_CONTROL
  if ((v4 ? ::setsockopt(ep->tx_, IPPROTO_IP, IP_TTL, &ttl, sizeof(ttl))
          : ::setsockopt(ep->tx_, IPPROTO_IPV6, IPV6_UNICAST_HOPS, &ttl, sizeof(ttl))) < 0 ||
      ::setsockopt(ep->tx_, SOL_SOCKET, SO_MARK, &mark, sizeof(mark)) < 0 ||
      ::setsockopt(ep->tx_, SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio)) < 0)
    return DP_SYS_ERROR(errno, "setting up the BFD transmit socket on {} failed", ifname);
  // RFC 5881 4: the source port is in 49152-65535
  std::minstd_rand rng(static_cast<unsigned>(::getpid()) ^ static_cast<unsigned>(ep->tx_));
  int err = EADDRINUSE;
  for (int i = 0; i < 64 && err; ++i) {
    auto port = static_cast<uint16_t>(bfd::kSourcePortMin + rng() % (65536 - bfd::kSourcePortMin));
    SockAddr src = sockaddr_of(any_of(peer.family), port);
    err = ::bind(ep->tx_, reinterpret_cast<sockaddr*>(&src.ss), src.len) < 0 ? errno : 0;
  }
  if (err) return DP_SYS_ERROR(err, "no free BFD source port in 49152-65535 on {}", ifname);
  return ep;
}

Result<void> BfdEndpoint::send(const bfd::Packet& p) {
  auto bytes = bfd::encode(p, auth_);
  SockAddr to = sockaddr_of(peer_, bfd::kPort);
  if (::sendto(tx_, bytes.data(), bytes.size(), MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to.ss),
               to.len) < 0)
    return DP_SYS_ERROR(errno, "sending BFD to {} on {} failed", peer_.str(), ifname_);
  return {};
}

std::vector<BfdEndpoint::Received> BfdEndpoint::receive() {
  std::vector<Received> out;
  for (size_t k = 0; k < kBatch; ++k) {
    uint8_t buf[512];
    alignas(cmsghdr) char ctrl[256];
    sockaddr_storage from{};
    iovec iov{buf, sizeof(buf)};
    msghdr m{};
    m.msg_name = &from;
    m.msg_namelen = sizeof(from);
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctrl;
    m.msg_controllen = sizeof(ctrl);
    ssize_t n = ::recvmsg(rx_, &m, MSG_DONTWAIT);
    if (n < 0) break;
    int ttl = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      if ((c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) ||
          (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_HOPLIMIT))
        std::memcpy(&ttl, CMSG_DATA(c), sizeof(ttl));
    }
    IpAddr src;
    src.family = from.ss_family;
    if (from.ss_family == AF_INET)
      std::memcpy(src.bytes.data(), &reinterpret_cast<sockaddr_in*>(&from)->sin_addr, 4);
    else if (from.ss_family == AF_INET6)
      std::memcpy(src.bytes.data(), &reinterpret_cast<sockaddr_in6*>(&from)->sin6_addr, 16);
    if (!(src == peer_)) {
      out.push_back({DP_ERROR("from {}, not the rail's peer {}", src.str(), peer_.str())});
      continue;
    }
    if (ttl != bfd::kTtl) {
      out.push_back({DP_ERROR("TTL {} is not 255 (RFC 5881 5)", ttl)});
      continue;
    }
    out.push_back({bfd::decode(std::span<const uint8_t>(buf, static_cast<size_t>(n)), auth_)});
  }
  return out;
}

}  // namespace dp

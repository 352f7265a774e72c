// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/sock_reset.h"

#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace dp {

namespace {

// TCP states worth ending: everything but LISTEN, TIME_WAIT and CLOSE.
constexpr uint32_t kStates = (1u << TCP_ESTABLISHED) | (1u << TCP_SYN_SENT) | (1u << TCP_SYN_RECV) |
                             (1u << TCP_FIN_WAIT1) | (1u << TCP_FIN_WAIT2) |
                             (1u << TCP_CLOSE_WAIT) | (1u << TCP_LAST_ACK) | (1u << TCP_CLOSING);

struct Request {
  nlmsghdr h;
  inet_diag_req_v2 r;
};

IpAddr addr_of(int family, const __be32* words) {
  IpAddr a;
  a.family = family;
  std::memcpy(a.bytes.data(), words, family == AF_INET ? 4 : 16);
  return a;
}

Result<void> send_request(int fd, uint16_t type, uint16_t flags, const inet_diag_req_v2& r) {
  Request req{};
  req.h.nlmsg_len = sizeof(req);
  req.h.nlmsg_type = type;
  req.h.nlmsg_flags = NLM_F_REQUEST | flags;
  req.r = r;
  sockaddr_nl nl{};
  nl.nl_family = AF_NETLINK;
  if (::sendto(fd, &req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&nl), sizeof(nl)) < 0)
    return DP_SYS_ERROR(errno, "sock_diag request failed");
  return {};
}

// One family's TCP sockets with their diag ids.
Result<std::vector<std::pair<TcpSocket, inet_diag_sockid>>> dump(int fd, int family) {
  inet_diag_req_v2 r{};
  r.sdiag_family = static_cast<uint8_t>(family);
  r.sdiag_protocol = IPPROTO_TCP;
  r.idiag_states = kStates;
  DP_TRY(send_request(fd, SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, r));
  std::vector<std::pair<TcpSocket, inet_diag_sockid>> out;
  std::vector<char> buf(64 * 1024);
  for (;;) {
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n < 0) return DP_SYS_ERROR(errno, "reading the sock_diag dump failed");
    auto* h = reinterpret_cast<nlmsghdr*>(buf.data());
    // NLMSG_OK compares the header's __u32 length with an int (the kernel's macro)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
    for (int len = static_cast<int>(n); NLMSG_OK(h, len); h = NLMSG_NEXT(h, len)) {
#pragma GCC diagnostic pop
      if (h->nlmsg_type == NLMSG_DONE) return out;
      if (h->nlmsg_type == NLMSG_ERROR) {
        auto* e = static_cast<nlmsgerr*>(NLMSG_DATA(h));
        return DP_SYS_ERROR(-e->error, "the sock_diag dump failed");
      }
      auto* m = static_cast<inet_diag_msg*>(NLMSG_DATA(h));
      TcpSocket s;
      s.local = addr_of(family, m->id.idiag_src);
      s.remote = addr_of(family, m->id.idiag_dst);
      s.sport = ntohs(m->id.idiag_sport);
      s.dport = ntohs(m->id.idiag_dport);
      int alen = static_cast<int>(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m)));
      for (auto* a = reinterpret_cast<rtattr*>(m + 1); RTA_OK(a, alen); a = RTA_NEXT(a, alen))
        if (a->rta_type == INET_DIAG_MARK && RTA_PAYLOAD(a) >= 4)
          std::memcpy(&s.mark, RTA_DATA(a), 4);
      out.push_back({s, m->id});
    }
  }
}

}  // namespace

Result<std::vector<TcpSocket>> destroy_tcp(const std::vector<IpAddr>& locals,
                                           const std::function<bool(const TcpSocket&)>& want) {
  Fd fd(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG));
  if (!fd.valid()) return DP_SYS_ERROR(errno, "opening a sock_diag socket failed");
  std::vector<TcpSocket> ended;
  for (int family : {AF_INET, AF_INET6}) {
    if (std::none_of(locals.begin(), locals.end(), [&](auto& a) { return a.family == family; }))
      continue;
    auto socks = dump(fd.get(), family);
    if (!socks) return socks.error();
    for (auto& [s, id] : *socks) {
      if (std::find(locals.begin(), locals.end(), s.local) == locals.end() || !want(s)) continue;
      inet_diag_req_v2 r{};
      r.sdiag_family = static_cast<uint8_t>(family);
      r.sdiag_protocol = IPPROTO_TCP;
      r.idiag_states = kStates;
      r.id = id;
      DP_TRY(send_request(fd.get(), SOCK_DESTROY, NLM_F_ACK, r));
      char ack[512];
      ssize_t n = ::recv(fd.get(), ack, sizeof(ack), 0);
      auto* h = reinterpret_cast<nlmsghdr*>(ack);
      if (n > 0 && h->nlmsg_type == NLMSG_ERROR &&
          static_cast<nlmsgerr*>(NLMSG_DATA(h))->error == 0)
        ended.push_back(s);
    }
  }
  return ended;
}

}  // namespace dp

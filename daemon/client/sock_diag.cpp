// SPDX-License-Identifier: Apache-2.0
#include "dualpath/client/sock_diag.h"

#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace dp {

namespace {

constexpr uint8_t kTcpListen = 10;  // TCP_LISTEN of include/net/tcp_states.h

IpAddr addr_of(int family, const __be32* words) {
  IpAddr a;
  a.family = family;
  std::memcpy(a.bytes.data(), words, family == AF_INET ? 4 : 16);
  return a;
}

int on_message(nl_msg* msg, void* arg) {
  auto* out = static_cast<std::vector<TcpSocketInfo>*>(arg);
  nlmsghdr* h = nlmsg_hdr(msg);
  if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) return NL_SKIP;
  auto* d = static_cast<inet_diag_msg*>(nlmsg_data(h));
  if (d->idiag_state == kTcpListen) return NL_OK;
  nlattr* tb[INET_DIAG_MAX + 1] = {};
  if (nlmsg_parse(h, sizeof(*d), tb, INET_DIAG_MAX, nullptr) < 0) return NL_SKIP;
  TcpSocketInfo s;
  s.src = addr_of(d->idiag_family, d->id.idiag_src);
  s.dst = addr_of(d->idiag_family, d->id.idiag_dst);
  s.sport = ntohs(d->id.idiag_sport);
  s.dport = ntohs(d->id.idiag_dport);
  s.state = d->idiag_state;
  s.inode = d->idiag_inode;
  s.cookie = static_cast<uint64_t>(d->id.idiag_cookie[1]) << 32 | d->id.idiag_cookie[0];
  s.rqueue = d->idiag_rqueue;
  s.wqueue = d->idiag_wqueue;
  if (tb[INET_DIAG_MARK]) s.mark = nla_get_u32(tb[INET_DIAG_MARK]);
  if (tb[INET_DIAG_INFO])
    decode_tcp_info(nla_data(tb[INET_DIAG_INFO]), static_cast<size_t>(nla_len(tb[INET_DIAG_INFO])),
                    s);
  out->push_back(s);
  return NL_OK;
}

}  // namespace

Result<std::vector<TcpSocketInfo>> tcp_sockets() {
  std::unique_ptr<nl_sock, void (*)(nl_sock*)> sk(nl_socket_alloc(), nl_socket_free);
  if (!sk) return make_error(ENOMEM, "netlink socket allocation failed");
  if (int err = nl_connect(sk.get(), NETLINK_SOCK_DIAG); err < 0)
    return make_error(0, std::string("connecting to sock_diag failed: ") + nl_geterror(err));
  std::vector<TcpSocketInfo> out;
  nl_socket_modify_cb(sk.get(), NL_CB_VALID, NL_CB_CUSTOM, on_message, &out);
  for (int family : {AF_INET, AF_INET6}) {
    inet_diag_req_v2 req{};
    req.sdiag_family = static_cast<uint8_t>(family);
    req.sdiag_protocol = IPPROTO_TCP;
    req.idiag_states = ~0u;
    req.idiag_ext = 1u << (INET_DIAG_INFO - 1);
    if (int err = nl_send_simple(sk.get(), SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, &req, sizeof(req));
        err < 0)
      return make_error(0, std::string("sock_diag request failed: ") + nl_geterror(err));
    if (int err = nl_recvmsgs_default(sk.get()); err < 0)
      return make_error(0, std::string("sock_diag dump failed: ") + nl_geterror(err));
  }
  return out;
}

}  // namespace dp

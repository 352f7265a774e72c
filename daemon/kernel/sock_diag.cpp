// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/sock_diag.h"

#include <linux/inet_diag.h>
#include <linux/mptcp.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

#include <algorithm>
#include <cstring>

#include "dualpath/kernel/netlink.h"

namespace dp {

namespace {

static_assert(sizeof(inet_diag_sockid) == sizeof(TcpSocketInfo::id));

IpAddr addr_of(int family, const __be32* words) {
  IpAddr a;
  a.family = family;
  std::memcpy(a.bytes.data(), words, family == AF_INET ? 4 : 16);
  return a;
}

struct Dump {
  std::vector<TcpSocketInfo>* out;
  bool with_info;
};

int on_message(nl_msg* msg, void* arg) {
  auto* dump = static_cast<Dump*>(arg);
  nlmsghdr* h = nlmsg_hdr(msg);
  if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) return NL_SKIP;
  auto* d = static_cast<inet_diag_msg*>(nlmsg_data(h));
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
  std::memcpy(s.id.data(), &d->id, sizeof(d->id));
  if (tb[INET_DIAG_MARK]) s.mark = nla_get_u32(tb[INET_DIAG_MARK]);
  if (dump->with_info && tb[INET_DIAG_INFO])
    decode_tcp_info(nla_data(tb[INET_DIAG_INFO]), static_cast<size_t>(nla_len(tb[INET_DIAG_INFO])),
                    s);
  // an MPTCP subflow's ULP information: its connection's token
  nlattr* ulp[INET_ULP_INFO_MAX + 1] = {};
  nlattr* sf[MPTCP_SUBFLOW_ATTR_MAX + 1] = {};
  if (dump->with_info && tb[INET_DIAG_ULP_INFO] &&
      nla_parse_nested(ulp, INET_ULP_INFO_MAX, tb[INET_DIAG_ULP_INFO], nullptr) == 0 &&
      ulp[INET_ULP_INFO_MPTCP] &&
      nla_parse_nested(sf, MPTCP_SUBFLOW_ATTR_MAX, ulp[INET_ULP_INFO_MPTCP], nullptr) == 0 &&
      sf[MPTCP_SUBFLOW_ATTR_TOKEN_LOC])
    s.mptcp_token = nla_get_u32(sf[MPTCP_SUBFLOW_ATTR_TOKEN_LOC]);
  dump->out->push_back(s);
  return NL_OK;
}

inet_diag_req_v2 request_of(int family, uint32_t states) {
  inet_diag_req_v2 req{};
  req.sdiag_family = static_cast<uint8_t>(family);
  req.sdiag_protocol = IPPROTO_TCP;
  req.idiag_states = states;
  return req;
}

Result<std::vector<TcpSocketInfo>> dump(const NlSocket& sk, int family, uint32_t states,
                                        bool with_info) {
  std::vector<TcpSocketInfo> out;
  Dump d{&out, with_info};
  nl_socket_modify_cb(sk.get(), NL_CB_VALID, NL_CB_CUSTOM, on_message, &d);
  inet_diag_req_v2 req = request_of(family, states);
  if (with_info) req.idiag_ext = 1u << (INET_DIAG_INFO - 1);
  DP_TRY(nl_result(nl_send_simple(sk.get(), SOCK_DIAG_BY_FAMILY, NLM_F_DUMP, &req, sizeof(req)),
                   "sock_diag request failed"));
  DP_TRY(nl_result(nl_recvmsgs_default(sk.get()), "sock_diag dump failed"));
  return out;
}

}  // namespace

Result<std::vector<TcpSocketInfo>> tcp_sockets(uint32_t states, bool with_info) {
  auto sk = NlSocket::connect(NETLINK_SOCK_DIAG);
  if (!sk) return sk.error();
  std::vector<TcpSocketInfo> out;
  for (int family : {AF_INET, AF_INET6}) {
    auto some = dump(*sk, family, states, with_info);
    if (!some) return some.error();
    out.insert(out.end(), some->begin(), some->end());
  }
  return out;
}

Result<std::vector<TcpSocketInfo>> destroy_tcp(
    const std::vector<IpAddr>& locals, const std::function<bool(const TcpSocketInfo&)>& want,
    bool with_info) {
  auto sk = NlSocket::connect(NETLINK_SOCK_DIAG);
  if (!sk) return sk.error();
  std::vector<TcpSocketInfo> ended;
  for (int family : {AF_INET, AF_INET6}) {
    if (std::none_of(locals.begin(), locals.end(), [&](auto& a) { return a.family == family; }))
      continue;
    auto socks = dump(*sk, family, kTcpEndable, with_info);
    if (!socks) return socks.error();
    // the dump's callback is done with; acknowledgements are read plainly
    nl_socket_modify_cb(sk->get(), NL_CB_VALID, NL_CB_DEFAULT, nullptr, nullptr);
    for (auto& s : *socks) {
      if (std::find(locals.begin(), locals.end(), s.src) == locals.end() || !want(s)) continue;
      inet_diag_req_v2 req = request_of(family, kTcpEndable);
      std::memcpy(&req.id, s.id.data(), sizeof(req.id));
      if (nl_send_simple(sk->get(), SOCK_DESTROY, NLM_F_ACK, &req, sizeof(req)) < 0) continue;
      if (nl_wait_for_ack(sk->get()) == 0) ended.push_back(s);
    }
  }
  return ended;
}

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/netlink.h"

#include <netlink/genl/genl.h>
#include <netlink/netlink.h>
#include <netlink/socket.h>

#include <fmt/format.h>

namespace dp {

void NlSocket::Free::operator()(nl_sock* s) const { nl_socket_free(s); }

int NlSocket::fd() const { return sk_ ? nl_socket_get_fd(sk_.get()) : -1; }

Result<void> nl_result(int err, const std::string& what) {
  if (err >= 0) return {};
  return make_error(0, fmt::format("{}: {}", what, nl_geterror(err)));
}

Result<NlSocket> NlSocket::connect(int protocol) {
  NlSocket s;
  s.sk_.reset(nl_socket_alloc());
  if (!s.sk_) return DP_SYS_ERROR(ENOMEM, "allocating a netlink socket failed");
  DP_TRY(nl_result(nl_connect(s.get(), protocol),
                   fmt::format("connecting to netlink family {} failed", protocol)));
  return s;
}

Result<NlSocket> NlSocket::connect_genl() {
  NlSocket s;
  s.sk_.reset(nl_socket_alloc());
  if (!s.sk_) return DP_SYS_ERROR(ENOMEM, "allocating a netlink socket failed");
  DP_TRY(nl_result(genl_connect(s.get()), "connecting to generic netlink failed"));
  return s;
}

Result<NlSocket> NlSocket::subscribe(int group) {
  auto s = connect(NETLINK_ROUTE);
  if (!s) return s.error();
  nl_socket_disable_seq_check(s->get());
  DP_TRY(nl_result(nl_socket_add_membership(s->get(), group),
                   fmt::format("subscribing to rtnetlink group {} failed", group)));
  DP_TRY(nl_result(nl_socket_set_nonblocking(s->get()), "making a netlink socket non-blocking"));
  return s;
}

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
// The one owner of netlink sockets (libnl-3): rtnetlink for routes, rules,
// neighbours, tc filters, link statistics and link events; sock_diag for the
// node's TCP sockets; generic netlink for the MPTCP path manager. Connected
// when made, closed with the object, every failure named.
#pragma once

#include <memory>
#include <string>

#include "dualpath/core/result.h"

struct nl_sock;  // libnl

namespace dp {

class NlSocket {
 public:
  // A socket connected to a netlink family: NETLINK_ROUTE, NETLINK_SOCK_DIAG.
  static Result<NlSocket> connect(int protocol);
  // A generic netlink socket (genl_connect).
  static Result<NlSocket> connect_genl();
  // A socket that receives the rtnetlink multicast `group` (RTNLGRP_LINK),
  // non-blocking, for the event loop; sequence numbers are not checked.
  static Result<NlSocket> subscribe(int group);

  NlSocket() = default;
  NlSocket(NlSocket&&) noexcept = default;
  NlSocket& operator=(NlSocket&&) noexcept = default;

  nl_sock* get() const { return sk_.get(); }
  int fd() const;
  explicit operator bool() const { return sk_ != nullptr; }

 private:
  struct Free {
    void operator()(nl_sock* s) const;
  };
  std::unique_ptr<nl_sock, Free> sk_;
};

// A libnl error code as a Result ("what: the reason"), or success for >= 0.
Result<void> nl_result(int err, const std::string& what);

}  // namespace dp

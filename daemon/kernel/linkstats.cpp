// SPDX-License-Identifier: Apache-2.0
#include <linux/if.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>

#include "dualpath/kernel/linkstats.h"

namespace dp {

Result<void> LinkStatsReader::open() {
  if (sk_) return {};
  auto sk = NlSocket::connect(NETLINK_ROUTE);
  if (!sk) return sk.error();
  sk_ = std::move(*sk);
  return {};
}

Result<LinkStats> LinkStatsReader::read(int ifindex) {
  if (auto r = open(); !r) return r.error();
  rtnl_link* link = nullptr;
  int err = rtnl_link_get_kernel(sk_.get(), ifindex, nullptr, &link);
  if (err < 0)
    return make_error(0, fmt::format("reading the statistics of ifindex {} failed: {}", ifindex,
                                     nl_geterror(err)));
  LinkStats s;
  s.tx_bytes = rtnl_link_get_stat(link, RTNL_LINK_TX_BYTES);
  s.rx_bytes = rtnl_link_get_stat(link, RTNL_LINK_RX_BYTES);
  s.tx_packets = rtnl_link_get_stat(link, RTNL_LINK_TX_PACKETS);
  s.rx_packets = rtnl_link_get_stat(link, RTNL_LINK_RX_PACKETS);
  s.tx_dropped = rtnl_link_get_stat(link, RTNL_LINK_TX_DROPPED);
  s.rx_dropped = rtnl_link_get_stat(link, RTNL_LINK_RX_DROPPED);
  s.tx_errors = rtnl_link_get_stat(link, RTNL_LINK_TX_ERRORS);
  s.rx_errors = rtnl_link_get_stat(link, RTNL_LINK_RX_ERRORS);
  s.oper_up = rtnl_link_get_operstate(link) == IF_OPER_UP;
  rtnl_link_put(link);
  return s;
}

}  // namespace dp

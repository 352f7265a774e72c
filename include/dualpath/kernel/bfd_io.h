// SPDX-License-Identifier: Apache-2.0
// BFD transport, RFC 5881 single hop: per rail, a receive socket on UDP 3784
// and a transmit socket from a port in 49152-65535, both bound to the rail's
// interface; packets go out with TTL (hop limit) 255 and one that arrives with
// any other is discarded. The transmit socket carries the redirect bit so
// dualpath's own egress program never steers BFD off its rail.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "dualpath/abi.h"
#include "dualpath/core/bfd.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"

namespace dp {

class BfdEndpoint {
 public:
  // mark: the redirect bit ([routing] redirect_mark), so that dualpath's
  // egress program never steers BFD off its rail; auth: what the packets it
  // sends carry and those it receives must (bfd::encode and decode)
  static Result<std::unique_ptr<BfdEndpoint>> open(const std::string& ifname, const IpAddr& peer,
                                                   uint32_t mark = DP_MARK_REDIRECTED,
                                                   bfd::Auth auth = {});
  ~BfdEndpoint();
  BfdEndpoint(const BfdEndpoint&) = delete;
  BfdEndpoint& operator=(const BfdEndpoint&) = delete;

  int rx_fd() const { return rx_; }
  const IpAddr& peer() const { return peer_; }
  const std::string& ifname() const { return ifname_; }
  Result<void> send(const bfd::Packet& p);

  struct Received {
    Result<bfd::Packet> packet;  // or why it was discarded
  };
  // The datagrams waiting on the receive socket (non-blocking), at most
  // kBatch: the rest wait for the loop's next turn, so that a flood (even
  // one the daemon cannot read as fast as it comes) never holds the loop,
  // its ticks and the other rails' sessions back. A peer sends a few a
  // detection time.
  static constexpr size_t kBatch = 64;
  std::vector<Received> receive();

 private:
  BfdEndpoint() = default;
  int rx_ = -1, tx_ = -1;
  IpAddr peer_;
  bfd::Auth auth_;
  std::string ifname_;
};

}  // namespace dp

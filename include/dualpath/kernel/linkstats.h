// SPDX-License-Identifier: Apache-2.0
// One interface's link statistics over rtnetlink (libnl-route-3).
#pragma once

#include "dualpath/core/measure.h"
#include "dualpath/core/result.h"
#include "dualpath/kernel/netlink.h"

namespace dp {

// Reads one interface's statistics over rtnetlink (libnl-route-3).
// Its socket belongs to the network namespace it was connected in: the first
// read's, or open()'s, for a reader that must read another namespace's
// interfaces from a thread that leaves it.
class LinkStatsReader {
 public:
  Result<void> open();
  Result<LinkStats> read(int ifindex);

 private:
  NlSocket sk_;
};

}  // namespace dp

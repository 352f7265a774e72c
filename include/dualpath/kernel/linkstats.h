// SPDX-License-Identifier: Apache-2.0
// One interface's link statistics over rtnetlink (libnl-route-3).
#pragma once

#include "dualpath/core/measure.h"
#include "dualpath/core/result.h"
#include "dualpath/kernel/netlink.h"

namespace dp {

// Reads one interface's statistics over rtnetlink (libnl-route-3).
class LinkStatsReader {
 public:
  Result<LinkStats> read(int ifindex);

 private:
  NlSocket sk_;  // connected at the first read
};

}  // namespace dp

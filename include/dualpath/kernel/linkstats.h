// SPDX-License-Identifier: Apache-2.0
// One interface's link statistics over rtnetlink (libnl-route-3).
#pragma once

#include "dualpath/core/measure.h"
#include "dualpath/core/result.h"

struct nl_sock;  // libnl

namespace dp {

// Reads one interface's statistics over rtnetlink (libnl-route-3).
class LinkStatsReader {
 public:
  LinkStatsReader();
  ~LinkStatsReader();
  LinkStatsReader(const LinkStatsReader&) = delete;
  LinkStatsReader& operator=(const LinkStatsReader&) = delete;
  Result<LinkStats> read(int ifindex);

 private:
  ::nl_sock* sk_ = nullptr;
};

}  // namespace dp

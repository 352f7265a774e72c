// SPDX-License-Identifier: Apache-2.0
// Upgrading a pinned datapath to another map layout without interrupting it.
//
// A daemon whose maps differ from the ones pinned by an earlier build (another
// DP_LAYOUT_VERSION, abi.h) does not stop at "incompatible pinned map". The
// skeleton leaves each incompatible pin alone and creates that map afresh,
// unpinned (DpSkeleton::load). Then, while the old programs still carry
// traffic on the old maps:
//   1. begin(): each old map's contents are copied into the new one. A value
//      keeps the common prefix of the old and new struct and is zero-filled
//      beyond it (structs evolve by appending fields).
//   2. the daemon attaches its programs: tc filters are replaced in place
//      (cls_bpf's replace is one pointer swap per hook) and the cgroup links
//      are updated (bpf_link_update): no packet sees neither program.
//   3. finish(): what the old programs did between 1 and 2 is carried over:
//      per-CPU counters get the old map's increments since the copy, hash
//      entries created since are copied and those deleted since are deleted.
//      Then each new map is pinned where the old one was, and pins of maps
//      and programs this build no longer has (kernel/programs.h) are removed. The old maps go with
//      the last reference to them (the old programs).
#pragma once

#include <bpf/bpf.h>

#include <string>
#include <vector>

#include "dualpath/core/result.h"

namespace dp {

// An incompatible pinned map and the fresh map that replaces it.
struct StaleMap {
  std::string name;  // e.g. dp_flows
  std::string pin;   // where the old one is pinned, and the new one will be
  Fd old;            // the old map
  int fresh = -1;    // the new map (owned by the skeleton)
};

class LayoutUpgrade {
 public:
  // Copies each old map into its fresh one (step 1).
  static Result<LayoutUpgrade> begin(std::vector<StaleMap> maps);
  // Step 3: after the programs were swapped. `keep`: the names of every
  // pinned file this build owns in pin_dir; other dp_* (map), prog_* and
  // link_* (program) pins are removed.
  Result<void> finish(const std::string& pin_dir, const std::vector<std::string>& keep);

  // One line per map: what was copied, for the log and `dpctl status`.
  const std::vector<std::string>& report() const { return report_; }
  std::vector<std::string> maps() const;

 private:
  struct Map {
    StaleMap m;
    bpf_map_info old_info{}, new_info{};
    // per-CPU arrays: the old values at the copy, to add what came after
    std::vector<uint8_t> snapshot;
    // hashes: the keys copied
    std::vector<std::vector<uint8_t>> keys;
    bool copied = false;  // false: nothing could be carried (key size or type changed)
  };
  std::vector<Map> maps_;
  std::vector<std::string> report_;
};

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
// Classes by cgroup: the policy's cgroup paths and systemd units found in
// the cgroup v2 tree, as the ids the datapath matches (abi.h, dp_cgroups),
// and the slices `dpctl run` puts a class's processes in.
//
// A cgroup's id is the inode number of its directory in the cgroup v2
// filesystem: what bpf_skb_cgroup_id() and bpf_get_current_cgroup_id()
// return. A systemd unit is found by its directory's name (systemd names a
// unit's cgroup after the unit): the first directory so named, breadth-first
// from the root, which needs no D-Bus and works without systemd as PID 1.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"

namespace dp {

// The cgroup id of a cgroup v2 directory.
Result<uint64_t> cgroup_id(const std::string& dir);
// The cgroup v2 directory this process is in, relative to the root ("/..." ).
Result<std::string> own_cgroup();
// The directory (relative to root, "/...") named `unit`, at most
// `max_depth` levels down; nullopt when there is none.
std::optional<std::string> find_unit_cgroup(const std::string& root, const std::string& unit,
                                            int max_depth = 12);

// systemd-escape for a unit name's parts: '-' and every byte outside
// [A-Za-z0-9:_.] become \xNN.
std::string systemd_escape(const std::string& s);

// The slice of `dpctl run --class`: systemd's unit name
// ("dualpath-<node>-<class>.slice", each part escaped) and its directory
// relative to the cgroup root (systemd nests a slice under its prefixes:
// /dualpath.slice/dualpath-<node>.slice/dualpath-<node>-<class>.slice).
struct RunSlice {
  std::string unit;
  std::string dir;
};
RunSlice run_slice(const std::string& node, const std::string& klass);

// One cgroup rule of a policy, found (id != 0) or not (yet).
struct CgroupRule {
  size_t klass = 0;  // policy class index
  std::string rule;  // "cgroup /x", "unit x.service", "dpctl run"
  std::string dir;   // relative to the cgroup root; "" when a unit is not found
  uint64_t id = 0;   // 0: absent
  bool operator==(const CgroupRule&) const = default;
};

// Every class's rules in the tree under root: its cgroups and units, then its
// dpctl run slice (which is listed only when its directory exists). A unit
// found in `before` is looked for in the same directory first.
std::vector<CgroupRule> resolve_cgroups(const Policy& p, const std::string& root,
                                        const std::vector<CgroupRule>& before = {});

// Creates a class's run slice directory (and its parents) under root; returns
// it, absolute.
Result<std::string> make_run_slice(const std::string& root, const std::string& node,
                                   const std::string& klass);
// Removes the node's run slice directories that are empty (dualpathd
// --cleanup, a class gone from the policy): the kernel refuses to remove a
// cgroup that has processes or children, so nothing in use is touched.
// `keep`: classes whose slices stay.
void remove_run_slices(const std::string& root, const std::string& node,
                       const std::vector<std::string>& keep = {});

}  // namespace dp

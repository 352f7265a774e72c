// SPDX-License-Identifier: Apache-2.0
// Where dualpath's programs are attached: tc clsact filters on each rail,
// the sockops program on a cgroup, and the bpffs directory of the pins.
// Only what dualpath created is changed or removed.
#pragma once

#include <bpf/libbpf.h>

#include <cstdint>
#include <string>

#include "dualpath/core/result.h"
#include "dualpath/kernel/bpf_skeleton.h"

namespace dp {

// tc filter identity of dualpath's programs on clsact ingress and egress.
// Priority 1 puts them ahead of other filters; they pass with TC_ACT_UNSPEC so
// the filters after them still run (see bpf/dp_tc.bpf.c). The handle is what
// makes a filter dualpath's, together with the program's name.
inline constexpr uint32_t kTcHandle = 0xd9a1;
inline constexpr uint32_t kTcPriority = 1;

// tc attachment of dualpath's programs on one interface.
struct TcStatus {
  bool clsact = false;
  bool clsact_owned = false;
  uint32_t egress_prog_id = 0;  // 0 if our filter is absent
  uint32_t ingress_prog_id = 0;
};

class Tc {
 public:
  // Attaches (or atomically replaces) our filter on egress or ingress.
  // Creates clsact if absent and records that it did in dp_owned. Refuses if
  // a filter that is not ours sits at our handle and priority.
  static Result<void> attach(int ifindex, const std::string& ifname, bool egress, int prog_fd,
                             const dp_owned_map& owned);
  // Removes our filters; removes clsact only if we created it and it is empty.
  static Result<void> detach(int ifindex, const std::string& ifname, const dp_owned_map* owned);
  static Result<TcStatus> status(int ifindex, const dp_owned_map* owned);
};

// A cgroup program (sockops, sock_addr) attached to a cgroup v2 directory as
// a bpf_link pinned at <pin_dir>/link_<what>: it outlives the daemon like the
// tc filters, a restarted daemon adopts it (updating the program in place),
// and removing the pin detaches it.
Result<void> attach_cgroup(bpf_program* prog, const std::string& cgroup, const std::string& pin_dir,
                           const std::string& what);
// Attaches an sk_lookup program to this process's network namespace, its
// link pinned at pin_dir/link_<what>; a link pinned there already (a restart,
// an upgrade) gets the program swapped in place.
Result<void> attach_netns(bpf_program* prog, const std::string& pin_dir, const std::string& what);
// Attaches a tracing program (fentry, fmod_ret) by its BTF target, its link
// pinned at pin_dir/link_<what>. A pinned link of this very program is kept;
// another (an earlier build's) is replaced once the new one is attached, so
// that the hook is never missing. Tracing links cannot be updated in place.
Result<void> attach_trace(bpf_program* prog, const std::string& pin_dir, const std::string& what);
// Attaches an iterator (iter/udp) the same way, its link pinned at
// pin_dir/link_<what>; run_iter runs it over this process's namespace.
Result<void> attach_iter(bpf_program* prog, const std::string& pin_dir, const std::string& what);
Result<void> run_iter(const std::string& pin_dir, const std::string& what);
// Removes the pinned link pin_dir/link_<what>, if any (its program detaches).
Result<void> detach_pinned(const std::string& pin_dir, const std::string& what);
// The cgroup v2 mount point (from /proc/self/mounts).
Result<std::string> cgroup2_root();
// This network namespace's cookie (SO_NETNS_COOKIE).
Result<uint64_t> netns_cookie();

// bpffs helpers
Result<void> ensure_bpffs(const std::string& dir);  // mounts bpffs on /sys/fs/bpf if missing
Result<void> remove_pin_dir(const std::string& dir);
bool is_our_prog(uint32_t prog_id);  // a tc program of kPrograms, by name

}  // namespace dp

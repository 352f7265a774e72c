// SPDX-License-Identifier: Apache-2.0
// What the daemon checks about each rail against the policy's topology, at
// start and on every reload: reverse-path filtering, the path's source
// addresses, and the gateway's neighbour entry. Logged, and shown by
// `dpctl status`; a failed check is a warning, not a refusal (the node may be
// being set up), but it says what will not work.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dualpath/core/policy.h"
#include "dualpath/core/protocol.h"

namespace dp {

struct NodeCheck {
  std::string path, what;  // what: "rp_filter", "address", "neighbour"
  bool ok = true;
  std::string detail;
};

std::vector<NodeCheck> check_node(const Policy& p);

// The major and minor version of a kernel release as uname gives it
// ("6.1.0-13-amd64": 6, 1); nullopt if it starts otherwise.
std::optional<std::pair<int, int>> kernel_version(const std::string& release);
// The kernel dualpathd needs, checked before it loads anything: Linux 5.18
// or later (the datapath reads skb->tstamp_type; sk_lookup is 5.9, cgroup
// getpeername 5.8) with BTF (/sys/kernel/btf/vmlinux: CO-RE relocations of
// the datapath). `release` is uname's; kernel_problem("6.1.0-13-amd64",
// true) is empty.
std::string kernel_problem(const std::string& release, bool has_btf);
// The same for the running kernel.
std::string running_kernel_problem();
// Whether the running kernel is Linux major.minor or later.
bool running_kernel_at_least(int major, int minor);
// An interface's MTU in this network namespace; 0 if it does not exist.
int interface_mtu(const std::string& ifname);
json to_json(const std::vector<NodeCheck>& checks);

}  // namespace dp

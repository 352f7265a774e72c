// SPDX-License-Identifier: Apache-2.0
// dpctl env: the launch-time settings that put a framework's RDMA and socket
// traffic on the rails a class uses now. Kernel-bypass traffic (RoCE verbs,
// NCCL and UCX over IB) never passes a BPF hook, so dualpath cannot move it;
// what it can do is tell the framework at launch which device to open. The
// settings place connections when the framework makes them and never move
// them afterwards. Pure: the daemon gathers the rails and their RDMA ports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/protocol.h"
#include "dualpath/core/result.h"

namespace dp {

struct EnvRdmaPort {
  std::string device;  // "mlx5_0"
  int port = 1;
  std::optional<int> gid_index;  // the RoCE v2 GID of the rail's netdev
};

struct EnvRail {
  std::string path;       // policy path name
  std::string interface;  // its netdev
  double share = 0;       // percent of the class's new connections
  std::vector<EnvRdmaPort> rdma;
};

// `rails`: the class's rails with a share, largest share first. Refuses when
// there is none, or when one of them has no RDMA port.
Result<json> launch_env(const std::string& klass, std::optional<uint8_t> dscp,
                        const std::vector<EnvRail>& rails);

// The variables of launch_env's "env" as `export NAME='value'` lines.
std::string env_as_shell(const json& env);

}  // namespace dp

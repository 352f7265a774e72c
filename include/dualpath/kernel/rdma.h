// SPDX-License-Identifier: Apache-2.0
// RDMA (RoCE) counters. Traffic a hardware NIC moves by RDMA never passes tc
// or XDP, yet it loads the rail: dualpath reads the devices' port and hardware
// counters from sysfs and adds them to the rail's load and health.
//
// Layout read (as the kernel lays out /sys/class/infiniband):
//   <root>/<dev>/ports/<n>/counters/port_{xmit,rcv}_{data,packets}   data in 4-byte words
//   <root>/<dev>/ports/<n>/hw_counters/{np_cnp_sent,rp_cnp_handled,np_ecn_marked_roce_packets,
//                                       out_of_sequence,packet_seq_err,local_ack_timeout_err}
//   <root>/<dev>/ports/<n>/gid_attrs/ndevs/<i>                         the netdev of a RoCE port
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dualpath/core/measure.h"
#include "dualpath/core/result.h"

namespace dp {

inline constexpr const char* kRdmaSysfs = "/sys/class/infiniband";

struct RdmaPort {
  std::string device;  // "mlx5_0"
  int port = 1;
  std::string netdev;  // "eth2"; empty when the port has none (InfiniBand)
  bool operator==(const RdmaPort&) const = default;
};

// The RDMA devices' ports and their netdevs. Device names come from
// libibverbs when root is the kernel's /sys/class/infiniband, and from a
// directory listing of root otherwise (fixtures, containers with a bind
// mount). No devices is not an error: the result is empty.
Result<std::vector<RdmaPort>> discover_rdma(const std::string& root);
// Device names from a directory listing of root only.
Result<std::vector<RdmaPort>> discover_rdma_sysfs(const std::string& root,
                                                  const std::vector<std::string>& devices = {});
// libibverbs' device list (ibv_get_device_list); empty without devices.
std::vector<std::string> ibverbs_devices();

// One port's counters, data scaled from 4-byte words to bytes. A hardware
// counter a driver does not provide reads as 0. ENOENT when the device is gone.
Result<RdmaCounters> read_rdma_counters(const std::string& root, const RdmaPort& port);

void add_rdma(RdmaCounters& into, const RdmaCounters& c);

// The GID index a RoCE v2 connection over `port` uses for its netdev (what
// NCCL_IB_GID_INDEX names): the first index whose gid_attrs/types entry is
// "RoCE v2" and whose gid_attrs/ndevs entry is the netdev, preferring one
// whose GID (gids/<i>) is IPv4-mapped when the port has both.
std::optional<int> roce_v2_gid_index(const std::string& root, const RdmaPort& port);

}  // namespace dp

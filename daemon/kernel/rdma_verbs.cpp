// SPDX-License-Identifier: Apache-2.0
#include <infiniband/verbs.h>

#include <filesystem>

#include "dualpath/kernel/rdma.h"

namespace dp {

std::vector<std::string> ibverbs_devices() {
  std::vector<std::string> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return out;  // no RDMA subsystem or no devices
  for (int i = 0; i < n; ++i) out.emplace_back(ibv_get_device_name(list[i]));
  ibv_free_device_list(list);
  return out;
}

Result<std::vector<RdmaPort>> discover_rdma(const std::string& root) {
  namespace fs = std::filesystem;
  if (fs::path(root) == fs::path(kRdmaSysfs)) {
    auto names = ibverbs_devices();
    if (names.empty()) return std::vector<RdmaPort>{};
    return discover_rdma_sysfs(root, names);
  }
  return discover_rdma_sysfs(root);
}

}  // namespace dp

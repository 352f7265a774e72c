// SPDX-License-Identifier: Apache-2.0
// The plugin's log goes through the logger NCCL hands to init (so it lands in
// NCCL's log, filtered by NCCL_DEBUG and NCCL_DEBUG_SUBSYS). Before init, and
// when NCCL gives none, calls are dropped.
#pragma once

#include "dualpath/nccl/net.h"

namespace dpnccl {

void set_logger(ncclDebugLogger_t logger);
ncclDebugLogger_t logger();

}  // namespace dpnccl

// printf-style; every line is prefixed "NET/dualpath : ".
#define DPN_LOG(level, flags, fmt, ...)                                                           \
  do {                                                                                            \
    if (ncclDebugLogger_t dpn_l_ = ::dpnccl::logger())                                            \
      dpn_l_(level, flags, __FILE__, __LINE__, "NET/dualpath : " fmt __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)
#define DPN_WARN(fmt, ...) DPN_LOG(NCCL_LOG_WARN, NCCL_ALL, fmt __VA_OPT__(, ) __VA_ARGS__)
#define DPN_INFO(fmt, ...) \
  DPN_LOG(NCCL_LOG_INFO, NCCL_INIT | NCCL_NET, fmt __VA_OPT__(, ) __VA_ARGS__)
#define DPN_TRACE(fmt, ...) DPN_LOG(NCCL_LOG_TRACE, NCCL_NET, fmt __VA_OPT__(, ) __VA_ARGS__)

// SPDX-License-Identifier: Apache-2.0
#include "log.h"

#include <atomic>

namespace dpnccl {

namespace {
std::atomic<ncclDebugLogger_t> g_logger{nullptr};
}  // namespace

void set_logger(ncclDebugLogger_t l) {
  if (l) g_logger.store(l);
}
ncclDebugLogger_t logger() { return g_logger.load(); }

}  // namespace dpnccl

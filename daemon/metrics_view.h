// SPDX-License-Identifier: Apache-2.0
// What /metrics shows, gathered from the daemon's components (Node) into
// the plain MetricsView that core/metrics.cpp renders.
#pragma once

#include "commands/command.h"
#include "dualpath/core/metrics.h"

namespace dp {

MetricsView metrics_view(const Node& n);

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
// The /metrics endpoint: prometheus-cpp's HTTP server over the families
// build_metrics() makes (core/metrics.h).
#pragma once

#include <prometheus/metric_family.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dualpath/core/result.h"

namespace prometheus {
class Exposer;
}

namespace dp {

// Serves the families the daemon publishes. Building them costs more than
// the rest of a tick, and Prometheus scrapes every few seconds, so they are
// built on demand: a scrape marks them wanted and waits (at most fresh_wait)
// for the daemon's next tick to publish; the daemon builds only when wanted().
class MetricsExporter {
 public:
  // listen: "127.0.0.1:9464" or "[::1]:9464".
  static Result<std::unique_ptr<MetricsExporter>> start(const std::string& listen);
  ~MetricsExporter();
  void publish(std::vector<prometheus::MetricFamily> families);
  bool wanted() const;  // a scrape waits for a publish
  void set_fresh_wait(std::chrono::nanoseconds d);
  int port() const;

 private:
  class Snapshot;
  MetricsExporter() = default;
  std::shared_ptr<Snapshot> snapshot_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace dp

// SPDX-License-Identifier: Apache-2.0
#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "dualpath/core/metrics.h"
#include "dualpath/kernel/exporter.h"

namespace dp {

// Holds the newest families the daemon published; the HTTP thread reads them.
// A scrape asks for a fresh copy and waits for the daemon's next tick to
// publish it (at most fresh_wait: a daemon stuck elsewhere still gets its
// last figures served, and dualpath_metrics_age_seconds, taken at the scrape,
// says how old they are).
class MetricsExporter::Snapshot : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::unique_lock<std::mutex> g(mu_);
    uint64_t want = requested_.fetch_add(1) + 1;
    cv_.wait_for(g, wait_, [&] { return published_.load() >= want; });
    auto out = families_;
    if (set_at_ != std::chrono::steady_clock::time_point{})
      out.push_back(metrics_age_family(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - set_at_).count()));
    return out;
  }
  void set(std::vector<prometheus::MetricFamily> f) {
    {
      std::lock_guard<std::mutex> g(mu_);
      families_ = std::move(f);
      set_at_ = std::chrono::steady_clock::now();
      published_ = requested_.load();  // every request so far is answered
    }
    cv_.notify_all();
  }
  bool wanted() const { return requested_.load() > published_.load(); }
  void set_wait(std::chrono::nanoseconds d) {
    std::lock_guard<std::mutex> g(mu_);
    wait_ = d;
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  mutable std::atomic<uint64_t> requested_{0};
  std::atomic<uint64_t> published_{0};
  std::chrono::nanoseconds wait_ = std::chrono::milliseconds(500);
  std::vector<prometheus::MetricFamily> families_;
  std::chrono::steady_clock::time_point set_at_{};  // when families_ were published
};

Result<std::unique_ptr<MetricsExporter>> MetricsExporter::start(const std::string& listen) {
  std::unique_ptr<MetricsExporter> e(new MetricsExporter());
  e->snapshot_ = std::make_shared<Snapshot>();
  try {
    e->exposer_ = std::make_unique<prometheus::Exposer>(listen, 1);
  } catch (const std::exception& ex) {
    return DP_ERROR("serving metrics on {} failed: {}", listen, ex.what());
  }
  e->exposer_->RegisterCollectable(e->snapshot_);
  return e;
}

MetricsExporter::~MetricsExporter() = default;

void MetricsExporter::publish(std::vector<prometheus::MetricFamily> families) {
  snapshot_->set(std::move(families));
}

bool MetricsExporter::wanted() const { return snapshot_->wanted(); }

void MetricsExporter::set_fresh_wait(std::chrono::nanoseconds d) { snapshot_->set_wait(d); }

int MetricsExporter::port() const {
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

}  // namespace dp

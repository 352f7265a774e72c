#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include "dualpath/metrics.h"

namespace dp {

// Holds the newest families the daemon published; the HTTP thread reads them.
class MetricsExporter::Snapshot : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::lock_guard<std::mutex> g(mu_);
    return families_;
  }
  void set(std::vector<prometheus::MetricFamily> f) {
    std::lock_guard<std::mutex> g(mu_);
    families_ = std::move(f);
  }

 private:
  mutable std::mutex mu_;
  std::vector<prometheus::MetricFamily> families_;
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

int MetricsExporter::port() const {
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

}  // namespace dp

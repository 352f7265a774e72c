// SPDX-License-Identifier: Apache-2.0
// The metrics builder: names, types, and histogram and summary structure.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <cmath>

#include "dualpath/core/metrics.h"

using namespace std::chrono_literals;

namespace {

const prometheus::MetricFamily* find(const std::vector<prometheus::MetricFamily>& fs,
                                     const std::string& n) {
  for (auto& f : fs)
    if (f.name == n) return &f;
  return nullptr;
}

}  // namespace

TEST(Metrics, FamiliesFollowPrometheusConventions) {
  dp::PathMeasure m{1'000'000'000, 0.2, 2s};
  for (int i = 0; i < 10; ++i) {
    dp::PathSnapshot s;
    s.t = dp::Clock::now() - (10 - i) * 50ms;
    s.link.tx_bytes = static_cast<uint64_t>(i) * 1000;
    s.tcp.rtt_us[7] = static_cast<uint64_t>(i) * 10;  // [128, 256) us
    s.tcp.rtt_samples = static_cast<uint64_t>(i) * 10;
    s.tcp.srtt_us_sum = static_cast<uint64_t>(i) * 10 * 200;
    m.update(s);
  }
  dp::MetricsView v;
  v.version = "0.1.0";
  v.node = "n1";
  v.policy_file = "/etc/dualpath/policy.toml";
  v.policy_hash = "00112233aabbccdd";
  v.paths.push_back({"rail0", 1'000'000'000, &m, {}, "holddown", 0, 2, "up"});
  v.paths.push_back({"rail1", 250'000'000, nullptr, {}, "up", 1, 0, ""});
  dp::MetricsView::Class c{"rail0", "control", {}, {}, 0.8, 0.97};
  c.counters.tx_bytes = 4242;
  c.tcp.rtt_us[7] = 90;
  c.tcp.rtt_us[20] = 1;
  c.tcp.rtt_samples = 91;
  c.tcp.srtt_us_sum = 90 * 200 + 1'500'000;
  v.classes.push_back(c);
  v.nccl.push_back({"expert-dispatch", "rail1", 1 << 20});
  v.nccl_processes = 2;
  auto fs = dp::build_metrics(v);

  for (auto& f : fs) {
    EXPECT_EQ(f.name.rfind("dualpath_", 0), 0u) << f.name;
    if (f.type == prometheus::MetricType::Counter) {
      EXPECT_EQ(f.name.substr(f.name.size() - 6), "_total") << f.name;
    }
    EXPECT_FALSE(f.metric.empty()) << "empty family " << f.name;
  }
  auto* hs = find(fs, "dualpath_path_health_state");
  ASSERT_TRUE(hs);
  ASSERT_EQ(hs->metric.size(), 12u) << "six states for each of two paths";
  double holddown = -1;
  for (auto& m1 : hs->metric)
    if (m1.label[0].value == "rail0" && m1.label[1].value == "holddown") holddown = m1.gauge.value;
  EXPECT_EQ(holddown, 1);
  auto* bfd = find(fs, "dualpath_path_bfd_up");
  ASSERT_TRUE(bfd);
  EXPECT_EQ(bfd->metric.size(), 1u) << "rail1 has no BFD session";
  auto* ed = find(fs, "dualpath_path_evidence_discounted_total");
  ASSERT_TRUE(ed);
  EXPECT_EQ(ed->metric.size(), 4u) << "congested and peer_queue for each of two paths";
  auto* info = find(fs, "dualpath_policy_info");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->metric[0].label[2].value, "00112233aabbccdd");
  // dualpathd(8) lists every family
  std::ifstream man(std::string(DP_SOURCE_DIR) + "/docs/man/dualpathd.8.scd");
  std::stringstream page;
  page << man.rdbuf();
  for (auto& f : fs)
    EXPECT_NE(page.str().find("*" + f.name + "*"), std::string::npos)
        << f.name << " is not in docs/man/dualpathd.8.scd, METRICS";
  auto* rl = find(fs, "dualpath_policy_reloads_total");
  ASSERT_TRUE(rl);
  EXPECT_EQ(rl->metric.size(), 2u) << "applied and refused, zero included";
  auto* lr = find(fs, "dualpath_policy_last_reload_successful");
  ASSERT_TRUE(lr);
  EXPECT_EQ(lr->metric[0].gauge.value, 1) << "no reload yet counts as success";
  auto* tx = find(fs, "dualpath_class_transmit_bytes_total");
  ASSERT_TRUE(tx);
  EXPECT_EQ(tx->metric[0].counter.value, 4242);
  auto* decided = find(fs, "dualpath_class_decided_share_ratio");
  auto* carried = find(fs, "dualpath_class_carried_share_ratio");
  ASSERT_TRUE(decided && carried);
  EXPECT_EQ(decided->metric[0].gauge.value, 0.8);
  EXPECT_EQ(carried->metric[0].gauge.value, 0.97);
  auto* nccl = find(fs, "dualpath_nccl_transmit_bytes_total");
  auto* procs = find(fs, "dualpath_nccl_processes");
  ASSERT_TRUE(nccl && procs);
  ASSERT_EQ(nccl->metric.size(), 1u);
  EXPECT_EQ(nccl->metric[0].label[0].value, "expert-dispatch");
  EXPECT_EQ(nccl->metric[0].label[1].value, "rail1");
  EXPECT_EQ(nccl->metric[0].counter.value, 1 << 20);
  EXPECT_EQ(procs->metric[0].gauge.value, 2);

  auto* h = find(fs, "dualpath_tcp_rtt_seconds");
  ASSERT_TRUE(h);
  const auto& hist = h->metric[0].histogram;
  EXPECT_EQ(hist.sample_count, 91u);
  ASSERT_FALSE(hist.bucket.empty());
  EXPECT_TRUE(std::isinf(hist.bucket.back().upper_bound));
  EXPECT_EQ(hist.bucket.back().cumulative_count, 91u);
  for (size_t i = 1; i < hist.bucket.size(); ++i) {
    EXPECT_GE(hist.bucket[i].cumulative_count, hist.bucket[i - 1].cumulative_count);
    EXPECT_GT(hist.bucket[i].upper_bound, hist.bucket[i - 1].upper_bound);
  }
  EXPECT_EQ(hist.bucket[7].upper_bound, 256e-6) << "bucket 7 holds [128, 256) us";
  EXPECT_EQ(hist.bucket[7].cumulative_count, 90u);

  auto* rtt = find(fs, "dualpath_path_rtt_seconds");
  ASSERT_TRUE(rtt);
  ASSERT_EQ(rtt->metric.size(), 1u) << "only rail0 has a sample";
  EXPECT_EQ(rtt->metric[0].summary.sample_count, 90u);
  ASSERT_EQ(rtt->metric[0].summary.quantile.size(), 3u);
  EXPECT_GT(rtt->metric[0].summary.quantile[0].value, 128e-6);
  EXPECT_LT(rtt->metric[0].summary.quantile[0].value, 256e-6);

  std::string text = dp::serialize_metrics(fs);
  EXPECT_NE(text.find("# TYPE dualpath_tcp_rtt_seconds histogram"), std::string::npos);
  EXPECT_NE(text.find("dualpath_path_capacity_bytes_per_second{path=\"rail1\"} 31250000"),
            std::string::npos)
      << text.substr(0, 2000);
}

// A daemon whose loop hangs still has its exporter answer, with the last
// figures it published: their age is taken at each scrape, so it grows.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "dualpath/kernel/exporter.h"

namespace {

std::string scrape(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    std::string req = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
    (void)::send(fd, req.data(), req.size(), 0);
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
      out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

double metrics_age(const std::string& text) {
  auto at = text.find("\ndualpath_metrics_age_seconds ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + std::string("\ndualpath_metrics_age_seconds ").size()));
}

}  // namespace

TEST(Metrics, TheirAgeIsTakenAtTheScrapeSoThatAHungLoopShows) {
  auto e = dp::MetricsExporter::start("127.0.0.1:0");
  ASSERT_TRUE(e) << e.error().what();
  (*e)->set_fresh_wait(20ms);  // the "loop" never publishes again
  dp::MetricsView v;
  v.version = "test";
  (*e)->publish(dp::build_metrics(v));
  double first = metrics_age(scrape((*e)->port()));
  std::this_thread::sleep_for(300ms);
  std::string text = scrape((*e)->port());
  double later = metrics_age(text);
  ASSERT_GE(first, 0) << text;
  EXPECT_GE(later - first, 0.25) << "the age must grow while nothing is published";
  EXPECT_NE(text.find("dualpath_build_info"), std::string::npos) << "the last figures are served";
  (*e)->publish(dp::build_metrics(v));
  EXPECT_LT(metrics_age(scrape((*e)->port())), 0.25) << "a publish makes them fresh";
}

// The daemon's tick time: each tick in the first bucket whose bound it does
// not exceed, exported as a cumulative histogram beside the tick interval.
TEST(Metrics, TickTimesAreAHistogramBesideTheInterval) {
  dp::MetricsView v;
  for (double s : {0.0002, 0.0005, 0.003, 0.003, 0.04, 2.0}) v.ticks.record(s);
  EXPECT_EQ(v.ticks.total, 6u);
  EXPECT_DOUBLE_EQ(v.ticks.last, 2.0);
  EXPECT_EQ(v.ticks.counts[0], 2u);  // <= 0.5 ms
  EXPECT_EQ(v.ticks.counts[3], 2u);  // (2, 5] ms
  EXPECT_EQ(v.ticks.counts[6], 1u);  // (20, 50] ms
  v.tick_interval = 0.05;
  auto fs = dp::build_metrics(v);
  const auto* h = find(fs, "dualpath_tick_seconds");
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(h->type, prometheus::MetricType::Histogram);
  const auto& b = h->metric.at(0).histogram.bucket;
  ASSERT_EQ(b.size(), dp::TickTimes::kBounds.size() + 1);
  EXPECT_EQ(b[0].cumulative_count, 2u);
  EXPECT_EQ(b[3].cumulative_count, 4u);
  EXPECT_EQ(b[6].cumulative_count, 5u);
  EXPECT_EQ(b.back().cumulative_count, 6u) << "the 2 s tick is only in +Inf";
  EXPECT_TRUE(std::isinf(b.back().upper_bound));
  EXPECT_NEAR(h->metric[0].histogram.sample_sum, 2.0467, 1e-9);
  const auto* i = find(fs, "dualpath_tick_interval_seconds");
  ASSERT_NE(i, nullptr);
  EXPECT_DOUBLE_EQ(i->metric.at(0).gauge.value, 0.05);
}

// Readiness of the multipath classes: a gauge, only with a multipath class.
TEST(Metrics, MultipathReadinessIsAGaugeOnlyWithAMultipathClass) {
  dp::MetricsView v;
  EXPECT_EQ(find(dp::build_metrics(v), "dualpath_multipath_ready"), nullptr);
  for (bool ready : {true, false}) {
    v.multipath_ready = ready;
    auto fs = dp::build_metrics(v);
    const auto* f = find(fs, "dualpath_multipath_ready");
    ASSERT_NE(f, nullptr);
    EXPECT_EQ(f->type, prometheus::MetricType::Gauge);
    EXPECT_DOUBLE_EQ(f->metric.at(0).gauge.value, ready ? 1 : 0);
  }
}

// SPDX-License-Identifier: Apache-2.0
// What one tick of dualpathd costs as its flow table grows: the daemon's own
// tick time (dualpath_tick_seconds) with 0, 16,384 and 65,536 active flows of
// a split class placed by bursts, the heaviest tick there is (it reads the
// flow table, 4,096 flows a tick, and plans the largest bursts' next ones
// once it has read all of it), phases alternating round by round in one run.
//
//   build/tests/bench/dp-bench-tick [--flows 0,16384,65536] [--seconds 10] [--rounds 2]
//
// Needs root and the lab down; brings the lab up and down. The flows are
// entries written into the daemon's pinned flow table (dp_flows) and kept
// active (their last_seen refreshed every 0.5 s), beside a real param-sync
// transfer that fills rail1 so that the class is split over both rails.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "../lab/lab_util.h"
#include "dualpath/abi.h"
#include "dualpath/core/encode.h"

namespace fs = std::filesystem;
using lab::cpu_seconds;
using lab::json;
using lab::read_file;
using lab::sh;

namespace {

const char* kPins = "/sys/fs/bpf/dualpath/dpl-a/";

uint64_t mono_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // bpf_ktime_get_ns()
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// The daemon's tick histogram now: cumulative count per bucket bound, the sum
// and the count.
struct TickHistogram {
  std::vector<std::pair<double, double>> buckets;  // le, cumulative count
  double sum = 0, count = 0;
};

TickHistogram scrape() {
  std::string text =
      sh("nsenter --net=/run/netns/dpl-a -- curl -sf http://127.0.0.1:9464/metrics").out;
  TickHistogram h;
  std::regex bucket(R"re(dualpath_tick_seconds_bucket\{le="([^"]+)"\} (\S+))re");
  for (std::sregex_iterator it(text.begin(), text.end(), bucket), end; it != end; ++it) {
    std::string le = (*it)[1];
    h.buckets.push_back({le == "+Inf" ? INFINITY : std::stod(le), std::stod((*it)[2])});
  }
  std::smatch m;
  if (std::regex_search(text, m, std::regex(R"(dualpath_tick_seconds_sum (\S+))")))
    h.sum = std::stod(m[1]);
  if (std::regex_search(text, m, std::regex(R"(dualpath_tick_seconds_count (\S+))")))
    h.count = std::stod(m[1]);
  return h;
}

// The smallest bucket bound at or above quantile q of the ticks between two
// scrapes.
double quantile_bound(const TickHistogram& a, const TickHistogram& b, double q) {
  double n = b.count - a.count;
  for (size_t i = 0; i < b.buckets.size() && i < a.buckets.size(); ++i)
    if (b.buckets[i].second - a.buckets[i].second >= q * n) return b.buckets[i].first;
  return INFINITY;
}

// The share of the ticks between two scrapes that took longer than `bound`.
double share_above(const TickHistogram& a, const TickHistogram& b, double bound) {
  double n = b.count - a.count;
  for (size_t i = 0; i < b.buckets.size() && i < a.buckets.size(); ++i)
    if (b.buckets[i].first >= bound)
      return n > 0 ? 1 - (b.buckets[i].second - a.buckets[i].second) / n : 0;
  return 0;
}

// Synthetic active flows of one class in dp_flows: v4-mapped keys no real
// socket has, a 64 KiB last burst, 1 KiB a packet on average (not ACK-only).
class Flows {
 public:
  Flows(int fd, uint8_t cls) : fd_(fd), cls_(cls) {}
  void put(size_t n) {
    keys_.resize(n);
    vals_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      dp_flow_key& k = keys_[i];
      k = {};
      k.saddr[2] = htonl(0xffff);
      k.daddr[2] = htonl(0xffff);
      k.saddr[3] = htonl(0x0ac80000u | static_cast<uint32_t>(i >> 8));  // 10.200.x.y
      k.daddr[3] = htonl(0x0ac90000u | static_cast<uint32_t>(i & 0xff));
      k.sport = htons(static_cast<uint16_t>(40000 + (i % 20000)));
      k.dport = htons(52000);
      k.proto = IPPROTO_TCP;
      dp_flow& f = vals_[i];
      f = {};
      f.cls = cls_;
      f.rail = static_cast<uint8_t>(i & 1);
      f.packets = 1024;
      f.bytes = 1 << 20;
      f.last_burst = 64 << 10;
      f.burst_bytes = 32 << 10;
      f.flowlet = 1;
    }
    refresh();
  }
  // last_seen now, for all of them, in batches
  void refresh() {
    uint64_t now = mono_ns();
    for (auto& f : vals_) f.first_seen_ns = f.last_seen_ns = now;
    for (size_t off = 0; off < keys_.size(); off += 4096) {
      uint32_t count = static_cast<uint32_t>(std::min<size_t>(4096, keys_.size() - off));
      LIBBPF_OPTS(bpf_map_batch_opts, o);
      if (bpf_map_update_batch(fd_, &keys_[off], &vals_[off], &count, &o) != 0)
        for (size_t i = off; i < off + count; ++i)
          bpf_map_update_elem(fd_, &keys_[i], &vals_[i], BPF_ANY);
    }
  }
  void clear() {
    for (auto& k : keys_) bpf_map_delete_elem(fd_, &k);
    keys_.clear();
    vals_.clear();
  }

 private:
  int fd_;
  uint8_t cls_;
  std::vector<dp_flow_key> keys_;
  std::vector<dp_flow> vals_;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dp-bench-tick: dualpathd's tick time as its flow table grows"};
  std::vector<size_t> sizes{0, 16384, 65536};
  double seconds = 10;
  int rounds = 2;
  app.add_option("--flows", sizes, "active flows per phase")->delimiter(',');
  app.add_option("--seconds", seconds, "per phase")->capture_default_str();
  app.add_option("--rounds", rounds, "rounds (the phases alternate)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) return std::fprintf(stderr, "needs root\n"), 1;
  if (sh("ip netns list").out.find("dpl-a") != std::string::npos)
    return std::fprintf(stderr, "the lab is up; take it down first (tools/dp-lab down)\n"), 1;

  // the lab's policies with param-sync placed by bursts
  std::string dir = fs::temp_directory_path() / ("dp-bench-tick-" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* f : {"lab-a.toml", "lab-b.toml"}) {
    std::string text = read_file(std::string(DP_SOURCE_DIR) + "/policies/" + f);
    text = std::regex_replace(text, std::regex(R"(load_threshold = 0.60)"),
                              "load_threshold = 0.60\nplacement = \"bursts\"\n"
                              "peak_window = \"100ms\"\nhold = \"1s\"");
    std::ofstream(dir + "/" + f) << text;
  }
  setenv("DP_LAB_POLICIES", dir.c_str(), 1);
  setenv("DP_BUILD", DP_BUILD_DIR, 1);
  std::string lab = std::string(DP_SOURCE_DIR) + "/tools/dp-lab";
  if (sh(lab + " up").rc != 0) return std::fprintf(stderr, "dp-lab up failed\n"), 1;
  auto pid = static_cast<pid_t>(std::stol("0" + read_file("/run/dualpath-lab/dpl-a.pid")));

  // param-sync fills rail1 (250 Mbit/s) so that the scheduler splits it
  double total_s = seconds * static_cast<double>(sizes.size() * static_cast<size_t>(rounds)) + 30;
  sh(lab + " exec b iperf3 -s -1 -D -p 52000");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::thread load([&] {
    sh(lab + " exec a iperf3 -c 10.99.0.2 -p 52000 -P 4 -t " +
       std::to_string(static_cast<int>(total_s)));
  });
  bool split = false;
  uint8_t slot = DP_CLASS_NONE;
  for (int i = 0; i < 100 && !split; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    for (auto& c : lab::dpctl("a", "class list"))
      if (c["name"] == "param-sync") split = c["rail"].is_null();
  }
  int names = bpf_obj_get((std::string(kPins) + "dp_class_names").c_str());
  for (uint32_t s = 0; s < DP_MAX_CLASSES && names >= 0; ++s) {
    dp_slot_name n{};
    if (bpf_map_lookup_elem(names, &s, &n) == 0 && dp::decode_name(n) == "param-sync")
      slot = static_cast<uint8_t>(s);
  }
  int flows_fd = bpf_obj_get((std::string(kPins) + "dp_flows").c_str());
  if (!split || slot == DP_CLASS_NONE || flows_fd < 0) {
    std::fprintf(stderr, "param-sync was not split over both rails (or the pins are missing)\n");
    sh(lab + " down");
    load.join();
    return 1;
  }

  std::printf(
      "dualpathd tick time, placement = \"bursts\", param-sync split over both rails (tick 50 "
      "ms, %.0f s per phase, %d rounds)\n\n",
      seconds, rounds);
  std::printf("%-8s %-8s %8s %10s %10s %10s %14s %8s\n", "round", "flows", "ticks", "mean ms",
              "p50 <= ms", "p99 <= ms", "over 10 ms", "CPU %");
  json out = json::array();
  Flows flows(flows_fd, slot);
  for (int r = 0; r < rounds; ++r) {
    auto order = sizes;
    if (r % 2) std::reverse(order.begin(), order.end());
    for (size_t n : order) {
      flows.put(n);
      std::atomic<bool> stop{false};
      std::thread keep([&] {
        while (!stop) {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          flows.refresh();
        }
      });
      std::this_thread::sleep_for(std::chrono::seconds(2));  // the plans settle
      auto a = scrape();
      double c0 = cpu_seconds(pid);
      auto t0 = std::chrono::steady_clock::now();
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      auto b = scrape();
      double cpu = (cpu_seconds(pid) - c0) /
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      stop = true;
      keep.join();
      double n_ticks = b.count - a.count;
      double mean_ms = n_ticks > 0 ? (b.sum - a.sum) / n_ticks * 1e3 : 0;
      double p50 = quantile_bound(a, b, 0.5) * 1e3, p99 = quantile_bound(a, b, 0.99) * 1e3;
      double over = share_above(a, b, 0.010);
      json planned = lab::dpctl("a", "status")["placement"]["planned_flows"];
      std::printf("%-8d %-8zu %8.0f %10.2f %10.1f %10.1f %13.1f%% %8.1f   (%s planned)\n", r + 1, n,
                  n_ticks, mean_ms, p50, p99, over * 100, cpu * 100, planned.dump().c_str());
      out.push_back({{"round", r + 1},
                     {"flows", n},
                     {"ticks", n_ticks},
                     {"mean_ms", mean_ms},
                     {"p50_bound_ms", p50},
                     {"p99_bound_ms", p99},
                     {"share_over_10ms", over},
                     {"cpu", cpu},
                     {"planned_flows", planned}});
      flows.clear();
    }
  }
  std::printf("\ngoal: a tick at 65,536 active flows under 20%% of the tick interval (10 ms)\n");
  if (const char* j = std::getenv("DP_BENCH_JSON")) std::ofstream(j) << out.dump(1) << "\n";
  close(flows_fd);
  if (names >= 0) close(names);
  sh(lab + " down");
  load.join();
  fs::remove_all(dir);
  return 0;
}

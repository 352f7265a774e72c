// SPDX-License-Identifier: Apache-2.0
// What one Prometheus scraping a fleet of dualpath nodes pays: the series a
// node exports, the bytes of one scrape and what rendering it costs the node,
// then the same for fleets of 100 to 5,000 nodes.
//
//   build/tests/bench/dp-bench-metrics [--policy policies/example-node.toml,...]
//       [--interval 15] [--renders 200] [--fleet 100,500,1000,2000,5000]
//       [--multipath CLASS] [--no-rdma]
//
// Needs no root and no lab. For each policy (parsed with the daemon's
// parser) it fills a MetricsView as a running node has it: every path
// measured (link, TCP, RDMA counters), healthy with BFD up, and every
// class on every path with counters, shares, NCCL bytes, connections and
// every kind of event counted by class, so that every family the policy
// can have has all its series (the most a node with it exports). The
// figures are measured: the series are counted in the text a real
// exporter (prometheus-cpp's, on 127.0.0.1, as dualpathd serves it)
// answers a scrape with, render times are timed builds and serializations
// of the families, and a node's growth per path and per class is counted
// by rendering the policy with one more of each.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dualpath/core/measure.h"
#include "dualpath/core/metrics.h"
#include "dualpath/core/policy.h"
#include "dualpath/version.h"

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;

namespace {

struct Options {
  std::vector<std::string> policies{std::string(DP_SOURCE_DIR) + "/policies/example-node.toml"};
  double interval = 15;
  int renders = 200;
  std::vector<int> fleet{100, 500, 1000, 2000, 5000};
  std::vector<std::string> multipath;
  bool rdma = true;
  size_t top = 8;
  std::string dump;  // write the first policy's scrape here
};

// A node's view and what it points into (the paths' measurements).
struct Node {
  std::vector<std::unique_ptr<dp::PathMeasure>> measures;
  dp::MetricsView view;
};

// The kinds of event dualpathd records with a class, each a series of
// dualpath_scheduler_switches_total for the class once it happened: the
// scheduler's five, an operator's pin, streams short of the decision and the
// NCCL plugins' moves; and "multipath" for a multipath class. (A path's
// health events have no class.)
const char* const kSwitchKinds[] = {"latency", "spill", "return",  "rebalance",
                                    "down",    "pin",   "streams", "nccl"};

// A path's measurements after a minute of traffic at 40% of its capacity:
// one snapshot per tick over the measurement window, so that rates, RTT
// percentiles and loss all have values.
std::unique_ptr<dp::PathMeasure> measured_path(const dp::Policy& pol, size_t i, bool rdma) {
  const auto& spec = pol.paths[i];
  auto m = std::make_unique<dp::PathMeasure>(spec.capacity_bps, pol.scheduler.ewma_weight,
                                             pol.measurement.window);
  const auto tick = std::chrono::duration_cast<dp::Nanos>(pol.scheduler.tick);
  const size_t ticks = static_cast<size_t>(pol.measurement.window / tick) + 1;
  const uint64_t bytes_per_tick =
      static_cast<uint64_t>(static_cast<double>(spec.capacity_bps) / 8 * 0.4 *
                            std::chrono::duration<double>(tick).count());
  const auto start = dp::Clock::now() - ticks * tick;
  for (size_t k = 1; k <= ticks; ++k) {
    dp::PathSnapshot s;
    s.t = start + k * tick;
    const uint64_t sent = (600 + k) * bytes_per_tick;  // about a minute of traffic before
    s.dp_tx_bytes = sent;
    s.link = {sent, sent / 2, sent / 1500, sent / 3000, k / 10 + 3, k / 20 + 1, 1, 2, true};
    s.tcp.rtt_samples = 0;
    for (size_t b = 6; b < 12; ++b) {
      s.tcp.rtt_us[b] = (600 + k) * (12 - b) * 40;
      s.tcp.rtt_samples += s.tcp.rtt_us[b];
    }
    s.tcp.srtt_us_sum = s.tcp.rtt_samples * 180;
    s.ls_rtt_us = s.tcp.rtt_us;
    s.tcp.segs_out = sent / 9000;
    s.tcp.retrans_segs = s.tcp.segs_out / 1000;
    s.tcp.rto_events = k / 40 + 2;
    if (rdma)
      s.rdma = dp::RdmaCounters{sent / 2, sent / 3, sent / 8192, sent / 8192, 120 + k,
                                110 + k,  300 + k,  7,           2,           1};
    m->update(s);
  }
  return m;
}

// The view dualpathd's metrics_view() gathers from a running node with this
// policy (daemon/metrics_view.cpp), every per-item field filled.
Node fill_view(const dp::Policy& pol, bool rdma) {
  Node n;
  auto& v = n.view;
  v.version = dp::kVersion;
  v.node = pol.node;
  v.policy_file = pol.file;
  v.policy_hash = pol.hash;
  v.cluster = pol.cluster;
  v.group = pol.group;
  v.group_hash = pol.group_hash;
  v.reloads_applied = 3;
  v.reloads_refused = 1;
  for (size_t i = 0; i < pol.paths.size(); ++i) {
    const auto& spec = pol.paths[i];
    n.measures.push_back(measured_path(pol, i, rdma));
    dp::MetricsView::Path p;
    p.name = spec.name;
    p.capacity_bps = spec.capacity_bps;
    p.measure = n.measures.back().get();
    for (size_t e = 0; e < p.exceptions.size(); ++e) p.exceptions[e] = 1000 * (e + 1) + i;
    p.health = "up";
    p.weight = 1;
    p.failures = 2;
    p.discounted_congested = 14;
    p.discounted_peer_queue = 3;
    if (pol.health.bfd && spec.bfd_address()) p.bfd = "up";
    p.police_rate_bps = spec.capacity_bps / 2;
    p.policed_packets = 5120;
    p.policed_bytes = 5120 * 1500;
    v.paths.push_back(std::move(p));
    for (size_t c = 0; c <= pol.classes.size(); ++c) {
      const bool unclassified = c == pol.classes.size();
      dp::MetricsView::Class k;
      k.path = spec.name;
      k.klass = unclassified ? "unclassified" : pol.classes[c].name;
      const uint64_t base = 1'000'000ull * (c + 1) * (i + 1);
      k.counters.tx_bytes = base * 1500;
      k.counters.tx_packets = base;
      k.counters.rx_bytes = base * 700;
      k.counters.rx_packets = base / 2;
      k.counters.redirect_packets = base / 100;
      k.counters.redirect_bytes = base / 100 * 1500;
      for (size_t b = 5; b < 14; ++b) {
        k.tcp.rtt_us[b] = base / (b + 1);
        k.tcp.rtt_samples += k.tcp.rtt_us[b];
      }
      k.tcp.srtt_us_sum = k.tcp.rtt_samples * 210;
      k.tcp.segs_out = base;
      k.tcp.retrans_segs = base / 1000;
      k.tcp.rto_events = c + i + 1;
      if (!unclassified) {
        const bool preferred = pol.classes[c].prefer == spec.name;
        k.decided = preferred ? 0.75 : 0.25;
        k.carried = preferred ? 0.74 : 0.26;
      }
      v.classes.push_back(std::move(k));
    }
  }
  for (const auto& c : pol.classes) {
    uint64_t count = 1;
    for (const char* kind : kSwitchKinds) v.switches.push_back({c.name, kind, count++ * 17});
    if (c.multipath) v.switches.push_back({c.name, "multipath", 9});
    for (const auto& p : pol.paths) v.nccl.push_back({c.name, p.name, 64ull << 30});
  }
  v.nccl_processes = 8;
  if (pol.topology == dp::Topology::Separate) {
    for (const auto& c : pol.classes) {
      for (const auto& p : pol.paths) v.connections.push_back({p.name, c.name, 4096});
      v.connections.push_back({"", c.name, 12});
    }
    for (const auto& p : pol.paths) v.handovers.push_back({p.name, "", 9});
  }
  v.connections_reset = 40;
  if (pol.has_multipath()) {
    for (const auto& c : pol.classes)
      if (c.multipath)
        for (const auto& p : pol.paths) v.subflows.push_back({p.name, c.name, 64});
    v.multipath = dp::MetricsView::Multipath{1200, 40, 80, 2, 1};
    v.multipath_ready = true;
  }
  for (int t = 0; t < 100'000; ++t) v.ticks.record(0.0004 + 0.0001 * (t % 40));
  v.tick_interval = std::chrono::duration<double>(pol.scheduler.tick).count();
  return n;
}

// The families as the daemon's exporter holds them (built on a tick) and
// hands them to prometheus-cpp at a scrape, with the age family taken then.
class Served : public prometheus::Collectable {
 public:
  explicit Served(std::vector<prometheus::MetricFamily> f) : families_(std::move(f)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    auto out = families_;
    out.push_back(dp::metrics_age_family(0.012));
    return out;
  }

 private:
  std::vector<prometheus::MetricFamily> families_;
};

// One HTTP/1.0 GET of /metrics on 127.0.0.1:port; the body (as sent: gzip
// when asked for), or "" on failure.
std::string scrape(int port, bool gzip) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string resp;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n";
    if (gzip) req += "Accept-Encoding: gzip\r\n";
    req += "\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      for (ssize_t r; (r = read(fd, buf, sizeof buf)) > 0;)
        resp.append(buf, static_cast<size_t>(r));
    }
  }
  close(fd);
  auto end = resp.find("\r\n\r\n");
  return end == std::string::npos ? "" : resp.substr(end + 4);
}

// Samples per family in exposition text: every line not starting with '#'
// is one sample, of the family the last "# TYPE" line named.
struct Count {
  size_t total = 0;
  std::map<std::string, size_t> by_family;
};
Count count_series(const std::string& text) {
  Count c;
  std::istringstream in(text);
  std::string line, family = "?";
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream w(line);
      std::string hash, kw, name;
      if (w >> hash >> kw >> name && kw == "TYPE") family = name;
      continue;
    }
    ++c.total;
    ++c.by_family[family];
  }
  return c;
}

size_t rendered_series(const dp::Policy& pol, bool rdma) {
  Node n = fill_view(pol, rdma);
  return count_series(dp::serialize_metrics(dp::build_metrics(n.view))).total;
}

double cpu_now(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

double quantile(std::vector<double> xs, double q) {
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, static_cast<size_t>(q * static_cast<double>(xs.size())))];
}

std::string first_line_of(const char* cmd) {
  std::string out;
  if (FILE* f = popen(cmd, "r")) {
    char buf[256];
    if (fgets(buf, sizeof buf, f)) out = buf;
    pclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "unknown";
}

// 12345678 -> "12,345,678"
std::string grouped(double x) {
  std::string s = std::to_string(static_cast<long long>(x + 0.5));
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
  return s;
}

std::string size_str(double bytes) {
  char b[32];
  if (bytes >= 1 << 20)
    snprintf(b, sizeof b, "%.1f MiB", bytes / (1 << 20));
  else
    snprintf(b, sizeof b, "%.1f KiB", bytes / 1024);
  return b;
}

int run_policy(const Options& o, const std::string& file) {
  auto load = dp::load_policy_file(file);
  if (!load.ok()) {
    for (auto& d : load.errors) fprintf(stderr, "%s\n", d.str().c_str());
    return 2;
  }
  dp::Policy pol = *load.policy;
  for (const auto& name : o.multipath) {
    int c = pol.class_index(name);
    if (c < 0) {
      fprintf(stderr, "%s: no class named \"%s\"\n", file.c_str(), name.c_str());
      return 2;
    }
    pol.classes[static_cast<size_t>(c)].multipath = true;
  }
  Node node = fill_view(pol, o.rdma);

  // What a scrape gets: served by prometheus-cpp as the daemon serves it.
  auto families = dp::build_metrics(node.view);
  auto served = std::make_shared<Served>(families);
  prometheus::Exposer exposer("127.0.0.1:0", 1);
  exposer.RegisterCollectable(served);
  const int port = exposer.GetListeningPorts().front();
  const std::string text = scrape(port, false);
  const std::string gz = scrape(port, true);
  if (text.empty() || gz.empty()) {
    fprintf(stderr, "scraping 127.0.0.1:%d failed\n", port);
    return 1;
  }
  const Count count = count_series(text);

  if (!o.dump.empty()) {
    std::ofstream(o.dump) << text;
    fprintf(stderr, "wrote %s\n", o.dump.c_str());
  }

  // The node's work per scrape: the daemon's loop builds the families from
  // the view on the tick after a scrape asked (build), and prometheus-cpp's
  // thread serves them: the exporter's copy, the age family, the text and
  // gzip, as Prometheus asks for it, and HTTP (served). Render is build
  // and text alone, as dp::serialize_metrics writes it. CPU time: of this
  // thread for build and render; of the process for served, so this
  // client's few reads and writes are in it too. Alternating, after as many
  // untimed rounds.
  const int warm = std::max(20, o.renders);
  std::vector<double> build_s, render_s, served_cpu_s, served_wall_s;
  size_t sink = 0;
  for (int r = 0; r < warm + o.renders; ++r) {
    const double c0 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
    auto built = dp::build_metrics(node.view);
    const double c1 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
    sink += dp::serialize_metrics(built).size();
    const double c2 = cpu_now(CLOCK_THREAD_CPUTIME_ID);
    const double p0 = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
    const auto w0 = SteadyClock::now();
    sink += scrape(port, true).size();
    const auto w1 = SteadyClock::now();
    const double p1 = cpu_now(CLOCK_PROCESS_CPUTIME_ID);
    if (r < warm) continue;
    build_s.push_back(c1 - c0);
    render_s.push_back(c2 - c0);
    served_cpu_s.push_back(p1 - p0);
    served_wall_s.push_back(std::chrono::duration<double>(w1 - w0).count());
  }
  if (sink == 0) return 1;
  const double render_med = quantile(render_s, 0.5), render_p99 = quantile(render_s, 0.99);
  const double served_med = quantile(served_cpu_s, 0.5), served_p99 = quantile(served_cpu_s, 0.99);
  const double build_med = quantile(build_s, 0.5);
  // What a node spends on one scrape: its loop's build and the exporter's
  // serving.
  const double node_med = build_med + served_med;

  // Growth: the same node with one more path, and with one more class.
  dp::Policy more_paths = pol, more_classes = pol;
  more_paths.paths.push_back(pol.paths.back());
  more_paths.paths.back().name = "extra-path";
  more_classes.classes.push_back(pol.classes.back());
  more_classes.classes.back().name = "extra-class";
  const size_t base = rendered_series(pol, o.rdma);
  const size_t per_path = rendered_series(more_paths, o.rdma) - base;
  const size_t per_class = rendered_series(more_classes, o.rdma) - base;
  // The most a node can have: DP_MAX_RAILS paths and every class slot but
  // the unclassified one.
  dp::Policy largest = pol;
  while (largest.paths.size() < DP_MAX_RAILS) {
    largest.paths.push_back(pol.paths.back());
    largest.paths.back().name = "path-" + std::to_string(largest.paths.size());
  }
  while (largest.classes.size() < DP_MAX_CLASSES - 1) {
    largest.classes.push_back(pol.classes.back());
    largest.classes.back().name = "class-" + std::to_string(largest.classes.size());
  }
  const size_t most = rendered_series(largest, o.rdma);

  const std::string src = std::string(DP_SOURCE_DIR) + "/";
  const std::string shown = file.rfind(src, 0) == 0 ? file.substr(src.size()) : file;
  printf("\n## %s: %zu paths, %zu classes, %s topology%s%s\n\n", shown.c_str(), pol.paths.size(),
         pol.classes.size(), pol.topology == dp::Topology::Separate ? "separate" : "shared",
         pol.has_multipath() ? ", multipath" : "", o.rdma ? ", RDMA counters" : "");
  printf("| per node | |\n|---|---:|\n");
  printf("| series (samples) | %zu |\n", count.total);
  printf("| families | %zu |\n", count.by_family.size());
  printf("| bytes per scrape (text) | %s |\n", grouped(static_cast<double>(text.size())).c_str());
  printf("| bytes per scrape (gzip) | %s |\n", grouped(static_cast<double>(gz.size())).c_str());
  printf("| render (build + text), CPU median / p99 | %.0f / %.0f us |\n", render_med * 1e6,
         render_p99 * 1e6);
  printf("| of which build, CPU median / p99 | %.0f / %.0f us |\n", build_med * 1e6,
         quantile(build_s, 0.99) * 1e6);
  printf("| served scrape (copy, text, gzip, HTTP), CPU median / p99 | %.0f / %.0f us |\n",
         served_med * 1e6, served_p99 * 1e6);
  printf("| served scrape, wall median / p99 | %.0f / %.0f us |\n",
         quantile(served_wall_s, 0.5) * 1e6, quantile(served_wall_s, 0.99) * 1e6);
  printf("| node CPU per scrape (build + served), median | %.0f us |\n", node_med * 1e6);
  printf("| each further path / class | +%zu / +%zu series |\n", per_path, per_class);
  printf("| the most a node can have (%d paths, %d classes) | %zu series |\n", DP_MAX_RAILS,
         DP_MAX_CLASSES - 1, most);

  std::vector<std::pair<size_t, std::string>> fams;
  for (auto& [name, n] : count.by_family) fams.push_back({n, name});
  std::sort(fams.begin(), fams.end(), [](auto& a, auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  printf("\n| family | series |\n|---|---:|\n");
  size_t rest = count.total;
  for (size_t i = 0; i < fams.size() && i < o.top; ++i) {
    printf("| %s | %zu |\n", fams[i].second.c_str(), fams[i].first);
    rest -= fams[i].first;
  }
  if (fams.size() > o.top) printf("| %zu others | %zu |\n", fams.size() - o.top, rest);

  printf(
      "\n| nodes | series | text per %gs scrape | gzip per %gs | samples/s | fleet CPU s per "
      "round: render | build + served |\n|---:|---:|---:|---:|---:|---:|---:|\n",
      o.interval, o.interval);
  for (int nodes : o.fleet) {
    const double n = nodes;
    printf("| %s | %s | %s | %s | %s | %.3f | %.3f |\n", grouped(n).c_str(),
           grouped(n * static_cast<double>(count.total)).c_str(),
           size_str(n * static_cast<double>(text.size())).c_str(),
           size_str(n * static_cast<double>(gz.size())).c_str(),
           grouped(n * static_cast<double>(count.total) / o.interval).c_str(), n * render_med,
           n * node_med);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"dp-bench-metrics: the Prometheus series and scrape cost of a fleet of nodes"};
  app.add_option("--policy", o.policies, "policy files (repeatable or comma-separated)")
      ->delimiter(',')
      ->check(CLI::ExistingFile);
  app.add_option("--interval", o.interval, "Prometheus scrape interval, seconds")
      ->check(CLI::PositiveNumber);
  app.add_option("--renders", o.renders, "timed renders and scrapes per policy")
      ->check(CLI::Range(10, 1'000'000));
  app.add_option("--fleet", o.fleet, "fleet sizes (nodes)")->delimiter(',');
  app.add_option("--multipath", o.multipath, "make this class of every policy multipath")
      ->delimiter(',');
  app.add_flag("!--no-rdma", o.rdma, "paths without RDMA counters");
  app.add_option("--top", o.top, "families listed by series");
  app.add_option("--dump", o.dump, "write the first policy's scrape (text) to this file");
  CLI11_PARSE(app, argc, argv);

  std::string commit =
      first_line_of("git -C '" DP_SOURCE_DIR "' rev-parse --short HEAD 2>/dev/null");
  char date[32];
  time_t now = time(nullptr);
  strftime(date, sizeof date, "%Y-%m-%d", gmtime(&now));
  printf("# dp-bench-metrics: commit %s, %s; %u CPUs, %s\n",
         commit.empty() ? "unknown" : commit.c_str(), date, std::thread::hardware_concurrency(),
         cpu_model().c_str());
  printf("# %d timed renders and served scrapes per policy; scrape interval %g s\n", o.renders,
         o.interval);
  // Each policy in a process of its own, whose exporter is its first, as
  // dualpathd's is: in one process a second exporter served the same
  // policy's scrapes in about half the CPU time of the first.
  fflush(stdout);
  for (size_t i = 0; i < o.policies.size(); ++i) {
    Options each = o;
    if (i > 0) each.dump.clear();
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 1;
    }
    if (pid == 0) {
      int rc = run_policy(each, o.policies[i]);
      fflush(stdout);
      _exit(rc);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) return 1;
    if (WEXITSTATUS(status)) return WEXITSTATUS(status);
  }
  return 0;
}

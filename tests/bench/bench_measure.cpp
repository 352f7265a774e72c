// SPDX-License-Identifier: Apache-2.0
// What measurement costs: dualpathd's CPU and memory with 10,000 active flows
// at the default tick, and sockops' cost to a request/response workload, with
// and without the program, alternated in one run.
//
//   build/tests/bench/dp-bench-measure [--seconds S] [--rounds R]
//
// Needs root and the lab down; brings the lab up (tools/dp-lab) and down.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "../lab/lab_util.h"

namespace fs = std::filesystem;
using lab::cpu_seconds;
using lab::json;
using lab::read_file;
using lab::sh;

namespace {

double rss_mb(pid_t pid, const char* key = "VmRSS:") {
  std::istringstream in(read_file("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(std::strlen(key))) / 1024.0;
  return 0;
}

pid_t daemon_pid() {
  return static_cast<pid_t>(std::stol("0" + read_file("/run/dualpath-lab/dpl-a.pid")));
}

// CPU share of one core the daemon used over `secs`.
double cpu_share(pid_t pid, double secs) {
  double c0 = cpu_seconds(pid);
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(secs));
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return (cpu_seconds(pid) - c0) / wall;
}

// Request/response transactions per second over one TCP connection, back to
// back: over rail0 to dpl-b, or over loopback inside dpl-a (sockops classifies
// by port, so a control-class socket on lo gets its callbacks too).
double rr_rate(bool loopback, uint16_t port, int transactions) {
  auto rtts = loopback ? lab::ping_pong("dpl-a", "dpl-a", "127.0.0.1", port, transactions, 64, 0)
                       : lab::ping_pong("dpl-a", "dpl-b", "10.99.0.2", port, transactions, 64, 0);
  double total_us = 0;
  for (double r : rtts) total_us += r;
  return rtts.empty() ? 0 : static_cast<double>(rtts.size()) / (total_us / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dp-bench-measure: CPU, memory and sockops cost of dualpath's measurement"};
  double seconds = 10;
  int rounds = 4;
  int transactions = 40000;
  app.add_option("--seconds", seconds, "measurement time per phase")->capture_default_str();
  app.add_option("--rounds", rounds, "sockops on/off rounds")->capture_default_str();
  app.add_option("--transactions", transactions, "request/response transactions per round")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (geteuid() != 0) return std::fprintf(stderr, "needs root\n"), 1;
  if (sh("ip netns list").out.find("dpl-a") != std::string::npos)
    return std::fprintf(stderr, "the lab is up; take it down first (tools/dp-lab down)\n"), 1;

  std::string dir = fs::temp_directory_path() / ("dp-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  for (const char* f : {"lab-a.toml", "lab-b.toml"})
    fs::copy_file(std::string(DP_SOURCE_DIR) + "/policies/" + f, dir + "/" + f);
  setenv("DP_LAB_POLICIES", dir.c_str(), 1);
  setenv("DP_BUILD", DP_BUILD_DIR, 1);
  std::string lab = std::string(DP_SOURCE_DIR) + "/tools/dp-lab";
  if (sh(lab + " up").rc != 0) return std::fprintf(stderr, "dp-lab up failed\n"), 1;
  pid_t pid = daemon_pid();
  std::this_thread::sleep_for(std::chrono::seconds(1));

  std::printf("dualpathd measurement cost (tick 50 ms, %.0f s per phase)\n\n", seconds);
  std::printf("%-34s %12s %10s %10s %12s\n", "phase", "flows", "CPU %", "RSS MB", "peak RSS MB");
  double idle = cpu_share(pid, seconds);
  json fl = lab::dpctl("a", "flow list --top 1");
  std::printf("%-34s %12llu %10.2f %10.1f %12.1f\n", "idle",
              static_cast<unsigned long long>(fl.value("total", 0)), idle * 100, rss_mb(pid),
              rss_mb(pid, "VmHWM:"));

  // 10,000 active UDP flows (logs class): every flow sends a datagram each second.
  std::thread load(
      [&] { lab::udp_flows("dpl-a", "10.99.0.1", "10.99.0.2", 54000, 20000, 10000, seconds + 6); });
  std::this_thread::sleep_for(std::chrono::seconds(3));
  double busy = cpu_share(pid, seconds);
  fl = lab::dpctl("a", "flow list --top 10");
  auto t0 = std::chrono::steady_clock::now();
  fl = lab::dpctl("a", "flow list --top 10");
  double list_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%-34s %12llu %10.2f %10.1f %12.1f\n", "10,000 active UDP flows (1/s each)",
              static_cast<unsigned long long>(fl.value("total", 0)), busy * 100, rss_mb(pid),
              rss_mb(pid, "VmHWM:"));
  load.join();
  std::printf(
      "goal: CPU <= 2%% of one core, RSS <= 30 MB; `dpctl flow list --top 10` with these flows: "
      "%.0f ms\n\n",
      list_ms);

  // sockops on (root cgroup) / off (an empty cgroup), alternated.
  std::string root = lab::sh("awk '$3 == \"cgroup2\" { print $2; exit }' /proc/self/mounts").out;
  root.erase(root.find_last_not_of("\n") + 1);
  std::string empty = root + "/dp-bench-sockops-off";
  fs::create_directories(empty);
  std::string file = dir + "/lab-a.toml";
  std::string good = read_file(file);
  auto set_cgroup = [&](const std::string& cg) {
    std::ofstream(file) << std::regex_replace(good, std::regex("window = \"2s\""),
                                              "window = \"2s\"\ncgroup = \"" + cg + "\"");
    json r = lab::dpctl("a", "policy reload");
    if (!r.contains("hash")) {
      std::fprintf(stderr, "reloading with sockops on %s failed: %s\n", cg.c_str(),
                   r.dump().c_str());
      std::exit(1);
    }
  };
  // ABBA: the order flips every round so warm-up favours neither
  for (bool loopback : {true, false}) {
    std::printf(
        "sockops cost on a TCP request/response workload (64 B, one connection, control class "
        "%s)\n",
        loopback ? "over loopback in dpl-a" : "over rail0 to dpl-b");
    std::printf("%-7s %-10s %16s\n", "round", "sockops", "transactions/s");
    double on = 0, off = 0;
    for (int r = 1; r <= rounds; ++r) {
      for (bool attached :
           r % 2 ? std::vector<bool>{false, true} : std::vector<bool>{true, false}) {
        set_cgroup(attached ? root : empty);
        auto port = static_cast<uint16_t>(53020 + r * 4 + attached * 2 + loopback);
        double rate = rr_rate(loopback, port, transactions);
        (attached ? on : off) += rate / rounds;
        std::printf("%-7d %-10s %16.0f\n", r, attached ? "attached" : "detached", rate);
      }
    }
    std::printf("\n%-10s %16s %10s\n", "sockops", "mean trans/s", "of detached");
    std::printf("%-10s %16.0f %10s\n", "detached", off, "100.0%");
    std::printf("%-10s %16.0f %9.1f%%   (goal: cost <= 3%%)\n\n", "attached", on, 100 * on / off);
  }
  set_cgroup(root);
  std::ofstream(file) << good;
  lab::dpctl("a", "policy reload");

  sh(lab + " down");
  fs::remove(empty);
  fs::remove_all(dir);
  return 0;
}

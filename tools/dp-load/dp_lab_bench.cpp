// SPDX-License-Identifier: Apache-2.0
// dp-lab bench: the same dp-load workload, with the same seed, in each mode
// (single, static, ecmp, mptcp, dualpath), alternating modes and repeating;
// one table, one JSON file and one SVG of per-rail utilisation over time.
// Run through `tools/dp-lab bench` (it sets the paths); needs root and the
// lab up without daemons (`dp-lab up --no-daemon`); leaves it in mode single.
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "dualpath/core/units.h"
#include "dualpath/kernel/linkstats.h"
#include "dualpath/kernel/procfs.h"
#include "load_core.h"

namespace fs = std::filesystem;
using dpload::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Opts {
  std::vector<std::string> modes{"single",   "static", "ecmp",      "mptcp",
                                 "dualpath", "cells",  "cells-any", "bursts"};
  int rounds = 3;
  std::string duration = "10s";
  bool quick = false;
  uint64_t seed = 1;
  std::string out;
  std::vector<std::string> faults;
  std::string sweep;  // "", "concurrency", "rate"
  std::string slo = "50ms";
  std::vector<double> rates{20, 40, 80, 160};
  std::vector<int> concurrencies{1, 2, 4, 8, 16};
  std::vector<std::string> load_args;  // passed to dp-load client
  std::string dp_lab, dp_load;
  double cap0 = 1e9, cap1 = 250e6;  // of the workload being run
  std::vector<std::string> workloads{"default"};
  bool suite = false;
};

// The workloads of the goals (issue 12): the lab's rates and dp-load's
// arguments. "default": four dispatch and four combine connections, 1 MiB
// each a step on average but skewed by expert popularity (1/rank), the
// hottest expert changing every 2 s; param-sync in bursts that come and go
// (4 MiB every 250 ms for 2 s, then 3 s of nothing), logs at 20 Mbit/s,
// control RPCs at 500/s. A fixed split is wrong part of the time: rail1 is
// busy while param-sync is on and idle while it is off. "overlap": the same,
// two steps in flight (one step's dispatch runs while the previous one's
// combine returns: both directions busy). "equal": the default on two
// 1 Gbit rails.
struct Workload {
  std::string name, rail0, rail1;
  std::vector<std::string> args;
};

const std::vector<Workload>& all_workloads() {
  static const std::vector<std::string> def{"--skew",       "1",     "--skew-shift", "2s",
                                            "--sync-on",    "2s",    "--sync-off",   "3s",
                                            "--sync-every", "250ms", "--sync-size",  "4MiB"};
  static const std::vector<Workload> w{
      {"default", "1gbit", "250mbit", def},
      {"overlap", "1gbit", "250mbit",
       [] {
         auto a = def;
         a.insert(a.end(), {"--concurrency", "2"});
         return a;
       }()},
      {"equal", "1gbit", "1gbit", def},
  };
  return w;
}

double bits(const std::string& rate) {
  auto b = dp::parse_bandwidth(rate);
  return b ? static_cast<double>(*b) : 0;
}

std::string slurp(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run(const std::string& cmd) {
  int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 1;
}

// Spawns argv in network namespace ns; stdout to a pipe (returned in *out_fd).
pid_t spawn(const std::string& ns, const std::vector<std::string>& argv, const std::string& log,
            int* out_fd) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    int nsfd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) != 0) _exit(126);
    dup2(p[1], 1);
    int lf = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (lf >= 0) dup2(lf, 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(p[1]);
  *out_fd = p[0];
  return pid;
}

int wait_exit(pid_t pid, int timeout_s) {
  for (int i = 0; i < timeout_s * 10; ++i) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return 124;
}

// Link transmit counters of both rails on both nodes, every 100 ms.
struct Sampler {
  struct Point {
    double t;
    double bps[2];  // per rail: a's and b's transmit rates added
  };
  std::vector<Point> points;
  std::atomic<bool> stop{false};
  std::thread th;
  void start() {
    th = std::thread([this] {
      // one reader per namespace: a netlink socket belongs to the netns it was made in
      std::unique_ptr<dp::LinkStatsReader> rd[2];
      int idx[2][2];
      int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
      for (int n = 0; n < 2; ++n) {
        int fd = open(n ? "/run/netns/dpl-b" : "/run/netns/dpl-a", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return;
        close(fd);
        rd[n] = std::make_unique<dp::LinkStatsReader>();
        idx[n][0] = static_cast<int>(if_nametoindex("rail0"));
        idx[n][1] = static_cast<int>(if_nametoindex("rail1"));
      }
      setns(self, CLONE_NEWNET);
      close(self);
      auto t0 = Clock::now();
      uint64_t last[2][2] = {};
      auto tlast = t0;
      bool first = true;
      while (!stop) {
        uint64_t cur[2][2] = {};
        for (int n = 0; n < 2; ++n)
          for (int r = 0; r < 2; ++r) {
            auto s = rd[n]->read(idx[n][r]);
            if (s) cur[n][r] = s->tx_bytes;
          }
        auto now = Clock::now();
        if (!first) {
          double dt = std::chrono::duration<double>(now - tlast).count();
          Point p{std::chrono::duration<double>(now - t0).count(), {0, 0}};
          for (int r = 0; r < 2; ++r)
            p.bps[r] =
                static_cast<double>(cur[0][r] - last[0][r] + cur[1][r] - last[1][r]) * 8 / dt;
          points.push_back(p);
        }
        first = false;
        std::memcpy(last, cur, sizeof(last));
        tlast = now;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  void finish() {
    stop = true;
    if (th.joinable()) th.join();
  }
};

// What a command run in network namespace ns prints as JSON (discarded: none).
json json_in(const std::string& ns, const std::string& cmd) {
  FILE* f = popen(("nsenter --net=/run/netns/" + ns + " -- " + cmd + " 2>/dev/null").c_str(), "r");
  if (!f) return json(json::value_t::discarded);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  pclose(f);
  return json::parse(s, nullptr, false);
}

std::map<std::string, double> nstat(const std::string& ns) {
  std::map<std::string, double> out;
  json j = json_in(ns, "nstat -azs --json");
  if (j.is_object() && j["kernel"].is_object())
    for (auto& [k, v] : j["kernel"].items()) out[k] = v.get<double>();
  return out;
}

// Packets the rails' root qdiscs (the lab's HTB shaping) dropped so far, both
// rails of one node: a queue overflowing, as against a segment retransmitted
// for nothing.
double qdisc_drops(const std::string& ns) {
  double drops = 0;
  for (const char* dev : {"rail0", "rail1"}) {
    json j = json_in(ns, std::string("tc -s -j qdisc show dev ") + dev);
    if (!j.is_array()) continue;
    for (auto& q : j)
      if (q.value("root", false) && q.contains("drops") && q["drops"].is_number())
        drops += q["drops"].get<double>();
  }
  return drops;
}

struct Fault {
  std::string kind, rail;
  int percent = 0;
  double at_s = 0;
};

std::optional<Fault> parse_fault(const std::string& s) {
  // blackhole:rail0@5s  down:rail0@5s  loss:rail0:30%@5s
  Fault f;
  auto at = s.find('@');
  if (at == std::string::npos) return std::nullopt;
  auto d = dp::parse_duration(s.substr(at + 1));
  if (!d) return std::nullopt;
  f.at_s = std::chrono::duration<double>(*d).count();
  std::string head = s.substr(0, at);
  std::vector<std::string> parts;
  std::stringstream ss(head);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  if (parts.size() < 2) return std::nullopt;
  f.kind = parts[0];
  f.rail = parts[1];
  if (f.kind == "loss") {
    if (parts.size() != 3) return std::nullopt;
    f.percent = std::atoi(parts[2].c_str());
    if (f.percent <= 0 || f.percent > 100) return std::nullopt;
  } else if ((f.kind != "blackhole" && f.kind != "down") || parts.size() != 2) {
    return std::nullopt;
  }
  if (f.rail != "rail0" && f.rail != "rail1") return std::nullopt;
  return f;
}

void inject(const Opts& o, const Fault& f) {
  if (f.kind == "down") {
    run(o.dp_lab + " fault b down " + f.rail);  // a sees its carrier go
    return;
  }
  std::string pct = f.kind == "loss" ? " " + std::to_string(f.percent) : "";
  for (const char* n : {"a", "b"})
    run(o.dp_lab + " fault " + n + " " + f.kind + " " + f.rail + pct);
}

void clear_faults(const Opts& o) {
  run(o.dp_lab + " fault clear");
  for (const char* ns : {"dpl-a", "dpl-b"})
    for (const char* r : {"rail0", "rail1"})
      run(std::string("nsenter --net=/run/netns/") + ns + " -- ip link set " + r + " up");
}

// One run of the workload in one mode.
json run_one(const Opts& o, const std::string& mode, int round,
             const std::vector<std::string>& extra, const std::string& tag) {
  json r = {{"mode", mode}, {"round", round}, {"tag", tag}};
  if (run(o.dp_lab + " mode " + mode) != 0) {
    r["error"] = "dp-lab mode " + mode + " failed";
    return r;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const bool mptcp = mode == "mptcp";
  std::string base = o.out + "/" + mode + "-" + tag + "-r" + std::to_string(round);
  std::vector<std::string> sargs{o.dp_load, "server", "--once", "--json", base + ".server.json"};
  if (mptcp) sargs.push_back("--mptcp");
  int sout = -1;
  pid_t server = spawn("dpl-b", sargs, base + ".log", &sout);
  char c;
  std::string line;
  while (read(sout, &c, 1) == 1 && c != '\n') line += c;
  close(sout);
  if (line != "ready") {
    wait_exit(server, 5);
    r["error"] = "dp-load server did not start (" + base + ".log)";
    return r;
  }
  auto na = nstat("dpl-a"), nb = nstat("dpl-b");
  const double qd0 = qdisc_drops("dpl-a") + qdisc_drops("dpl-b");
  Sampler sm;
  sm.start();
  std::vector<std::string> cargs{o.dp_load,      "client", "--connect",
                                 "10.99.0.2",    "-q",     "--json",
                                 base + ".json", "--seed", std::to_string(o.seed)};
  if (mptcp) cargs.push_back("--mptcp");
  for (auto& a : o.load_args) cargs.push_back(a);
  for (auto& a : extra) cargs.push_back(a);
  int cout_fd = -1;
  auto cpu0 = dp::cpu_times(true);
  auto t0 = Clock::now();
  pid_t client = spawn("dpl-a", cargs, base + ".log", &cout_fd);
  std::vector<Fault> fs;
  for (auto& s : o.faults)
    if (auto f = parse_fault(s)) fs.push_back(*f);
  std::sort(fs.begin(), fs.end(), [](auto& a, auto& b) { return a.at_s < b.at_s; });
  for (auto& f : fs) {
    std::this_thread::sleep_until(
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(f.at_s)));
    inject(o, f);
  }
  int crc = wait_exit(client, 600);
  auto cpu1 = dp::cpu_times(true);
  close(cout_fd);
  // the whole machine's CPUs while the workload ran: a mode near 100% measures
  // the CPU, not the rails
  auto busy = dp::cpu_busy(cpu0, cpu1);
  r["cpu_busy"] = busy.empty() ? 0.0 : busy[0];
  sm.finish();
  clear_faults(o);
  int src = wait_exit(server, 40);
  auto ea = nstat("dpl-a"), eb = nstat("dpl-b");
  const double qd1 = qdisc_drops("dpl-a") + qdisc_drops("dpl-b");
  json cj = json::parse(slurp(base + ".json"), nullptr, false);
  json sj = json::parse(slurp(base + ".server.json"), nullptr, false);
  r["client_exit"] = crc;
  r["server_exit"] = src;
  r["client"] = cj.is_discarded() ? json(nullptr) : cj;
  r["server"] = sj.is_discarded() ? json(nullptr) : sj;
  // utilisation from the link counters (both directions of each rail)
  double cap[2] = {o.cap0, o.cap1};
  json series = json::array();
  double sum[2] = {0, 0}, peak[2] = {0, 0}, both_sum = 0, both_peak = 0;
  for (auto& p : sm.points) {
    double u0 = p.bps[0] / (2 * cap[0]), u1 = p.bps[1] / (2 * cap[1]);
    double ub = (p.bps[0] + p.bps[1]) / (2 * (cap[0] + cap[1]));
    sum[0] += u0, sum[1] += u1, both_sum += ub;
    peak[0] = std::max(peak[0], u0), peak[1] = std::max(peak[1], u1);
    both_peak = std::max(both_peak, ub);
    series.push_back({p.t, u0, u1});
  }
  double n = std::max<double>(1, static_cast<double>(sm.points.size()));
  r["utilisation"] = {{"rail0", {{"mean", sum[0] / n}, {"peak", peak[0]}}},
                      {"rail1", {{"mean", sum[1] / n}, {"peak", peak[1]}}},
                      {"both", {{"mean", both_sum / n}, {"peak", both_peak}}},
                      {"series", series}};
  auto d = [&](const char* k, std::map<std::string, double>& s, std::map<std::string, double>& e) {
    return e[k] - s[k];
  };
  r["tcp"] = {
      {"retrans_segs", d("TcpRetransSegs", na, ea) + d("TcpRetransSegs", nb, eb)},
      {"reorder", d("TcpExtTCPSACKReorder", na, ea) + d("TcpExtTCPSACKReorder", nb, eb) +
                      d("TcpExtTCPTSReorder", na, ea) + d("TcpExtTCPTSReorder", nb, eb)},
      {"dsack_recv", d("TcpExtTCPDSACKRecv", na, ea) + d("TcpExtTCPDSACKRecv", nb, eb)},
      // segments the receivers reported as duplicates: retransmitted
      // for nothing (reordering taken for loss, a probe), not lost
      {"dsack_segs", d("TcpExtTCPDSACKRecvSegs", na, ea) + d("TcpExtTCPDSACKRecvSegs", nb, eb)},
      {"qdisc_drops", qd1 - qd0},
      {"ofo_queue", d("TcpExtTCPOFOQueue", na, ea) + d("TcpExtTCPOFOQueue", nb, eb)},
      {"resets", d("TcpEstabResets", na, ea) + d("TcpEstabResets", nb, eb)},
      {"timeouts", d("TcpExtTCPTimeouts", na, ea) + d("TcpExtTCPTimeouts", nb, eb)}};
  bool complete = r["client"].is_object() && r["server"].is_object() &&
                  r["client"].contains("steps") && r["client"].contains("rpc");
  r["complete"] = complete;
  uint64_t lost = 0;
  if (complete)
    lost = r["client"]["counters"]["checksum_errors"].get<uint64_t>() +
           r["server"]["counters"]["checksum_errors"].get<uint64_t>();
  r["data_lost"] = lost;
  return r;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

json get(const json& j, std::initializer_list<const char*> path) {
  const json* p = &j;
  for (const char* k : path) {
    if (!p->is_object() || !p->contains(k)) return nullptr;
    p = &(*p)[k];
  }
  return *p;
}

double num(const json& j, std::initializer_list<const char*> path) {
  json v = get(j, path);
  return v.is_number() ? v.get<double>() : NAN;
}

// Median over rounds of each figure, per mode.
json summarise(const std::vector<json>& runs, const std::string& mode) {
  std::map<std::string, std::vector<double>> f;
  for (auto& r : runs) {
    if (r["mode"] != mode || !r.value("complete", false)) continue;
    const json& c = r["client"];
    f["goodput_bps"].push_back(num(c, {"goodput_bps"}));
    f["step_p50_ms"].push_back(num(c, {"steps", "time_ms", "p50"}));
    f["step_p99_ms"].push_back(num(c, {"steps", "time_ms", "p99"}));
    f["rpc_p50_us"].push_back(num(c, {"rpc", "rtt_us", "p50"}));
    f["rpc_p99_us"].push_back(num(c, {"rpc", "rtt_us", "p99"}));
    f["steps_failed"].push_back(num(c, {"steps", "failed"}));
    f["longest_stall_s"].push_back(num(c, {"steps", "longest_stall_s"}));
    f["errors"].push_back(num(c, {"errors"}) + num(r, {"server", "counters", "checksum_errors"}) +
                          num(r, {"server", "counters", "connection_errors"}));
    f["util_rail0_mean"].push_back(num(r, {"utilisation", "rail0", "mean"}));
    f["util_rail0_peak"].push_back(num(r, {"utilisation", "rail0", "peak"}));
    f["util_rail1_mean"].push_back(num(r, {"utilisation", "rail1", "mean"}));
    f["util_rail1_peak"].push_back(num(r, {"utilisation", "rail1", "peak"}));
    f["util_both_mean"].push_back(num(r, {"utilisation", "both", "mean"}));
    f["retrans_segs"].push_back(num(r, {"tcp", "retrans_segs"}));
    f["dsack_segs"].push_back(num(r, {"tcp", "dsack_segs"}));
    f["qdisc_drops"].push_back(num(r, {"tcp", "qdisc_drops"}));
    f["reorder"].push_back(num(r, {"tcp", "reorder"}));
    f["ofo_queue"].push_back(num(r, {"tcp", "ofo_queue"}));
    f["timeouts"].push_back(num(r, {"tcp", "timeouts"}));
    f["cpu_busy"].push_back(num(r, {"cpu_busy"}));
    f["resets"].push_back(num(r, {"tcp", "resets"}));
  }
  json s = {{"mode", mode}, {"runs", f["goodput_bps"].size()}};
  for (auto& [k, v] : f) s[k] = median(v);
  return s;
}

void print_table(const std::vector<json>& sums, bool faults) {
  const json* single = nullptr;
  for (auto& s : sums)
    if (s["mode"] == "single") single = &s;
  std::printf(
      "\n%-9s %4s %10s %6s %6s %6s %6s %6s %9s %9s %9s %9s %7s %7s %7s %7s %7s %5s %6s %8s %8s",
      "mode", "runs", "goodput", "r0 avg", "r0 pk", "r1 avg", "r1 pk", "both", "step p50",
      "step p99", "rpc p50", "rpc p99", "retx", "spur", "qdrop", "reord", "ofo", "cpu", "errors",
      "gput/1", "p99/1");
  if (faults) std::printf(" %6s %8s %6s", "failed", "stall s", "resets");
  std::printf("\n");
  for (auto& s : sums) {
    auto v = [&](const char* k) {
      return s.contains(k) && s[k].is_number() ? s[k].get<double>() : NAN;
    };
    double gr = single ? v("goodput_bps") / (*single)["goodput_bps"].get<double>() : NAN;
    double pr = single ? v("step_p99_ms") / (*single)["step_p99_ms"].get<double>() : NAN;
    std::printf(
        "%-9s %4d %10s %5.0f%% %5.0f%% %5.0f%% %5.0f%% %5.0f%% %7.1fms %7.1fms %7.0fus %7.0fus "
        "%7.0f %7.0f %7.0f %7.0f %7.0f %4.0f%% %6.0f %7.2fx %7.2fx",
        s["mode"].get<std::string>().c_str(), s["runs"].get<int>(),
        dp::format_bandwidth(v("goodput_bps")).c_str(), 100 * v("util_rail0_mean"),
        100 * v("util_rail0_peak"), 100 * v("util_rail1_mean"), 100 * v("util_rail1_peak"),
        100 * v("util_both_mean"), v("step_p50_ms"), v("step_p99_ms"), v("rpc_p50_us"),
        v("rpc_p99_us"), v("retrans_segs"), v("dsack_segs"), v("qdisc_drops"), v("reorder"),
        v("ofo_queue"), 100 * v("cpu_busy"), v("errors"), gr, pr);
    if (faults)
      std::printf(" %6.0f %8.2f %6.0f", v("steps_failed"), v("longest_stall_s"), v("resets"));
    std::printf("\n");
  }
  std::printf(
      "(medians over rounds; utilisation from the link counters every 100 ms, both "
      "directions;\n retx: TCP segments retransmitted, spur: of them, what the receivers "
      "reported as duplicates\n (DSACK: not lost), qdrop: packets the rails' qdiscs dropped, "
      "reord: reorderings the senders detected "
      "(SACK and\n timestamps), ofo: segments the receivers queued out of order, cpu: both "
      "cores busy;\n gput/1 and p99/1 against single)\n");
}

// The goals of issue 12 for dualpath against the other modes of the same run;
// each line says what was measured and whether the goal was met.
json print_goals(const std::vector<json>& sums, const Opts& o, const std::string& mine) {
  std::map<std::string, const json*> m;
  for (auto& s : sums) m[s["mode"].get<std::string>()] = &s;
  json out = json::array();
  if (!m.count(mine)) return out;
  auto v = [&](const std::string& mode, const char* k) -> double {
    if (!m.count(mode)) return NAN;
    const json& s = *m[mode];
    return s.contains(k) && s[k].is_number() ? s[k].get<double>() : NAN;
  };
  auto line = [&](const std::string& what, double got, double limit, bool higher_is_better,
                  const std::string& detail) {
    bool met = std::isfinite(got) && std::isfinite(limit) &&
               (higher_is_better ? got >= limit : got <= limit);
    std::string verdict = !std::isfinite(limit) ? "not measured" : met ? "met" : "NOT MET";
    std::printf("  %-52s %-12s %s\n", what.c_str(), verdict.c_str(), detail.c_str());
    out.push_back({{"goal", what}, {"value", got}, {"limit", limit}, {"met", met}});
  };
  const double dp_g = v(mine, "goodput_bps"), single_g = v("single", "goodput_bps");
  // What the workload can use of both rails: what it carried on one rail
  // alone, scaled by the rails' combined capacity.
  const double usable = single_g * (o.cap0 + o.cap1) / o.cap0;
  const double best_peer = std::fmax(v("ecmp", "goodput_bps"), v("mptcp", "goodput_bps"));
  const double best_p99 = std::fmin(v("ecmp", "step_p99_ms"), v("mptcp", "step_p99_ms"));
  auto bw = [](double b) { return dp::format_bandwidth(b); };
  std::printf("\ngoals (%s against the other modes of this run):\n", mine.c_str());
  line("goodput >= 90% of what the workload can use", dp_g / usable, 0.9, true,
       fmt::format("{} of {} ({:.0f}%; usable = single's {} x (rail0 + rail1) / rail0)", bw(dp_g),
                   bw(usable), 100 * dp_g / usable, bw(single_g)));
  line("goodput >= the best of ECMP and MPTCP", dp_g, best_peer, true,
       fmt::format("{} against {}", bw(dp_g), bw(best_peer)));
  double p99 = v(mine, "step_p99_ms");
  line("step p99 <= 0.6x single's", p99, 0.6 * v("single", "step_p99_ms"), false,
       fmt::format("{:.1f} ms against {:.1f} ms ({:.2f}x)", p99, v("single", "step_p99_ms"),
                   p99 / v("single", "step_p99_ms")));
  line("step p99 <= 0.85x static's", p99, 0.85 * v("static", "step_p99_ms"), false,
       fmt::format("{:.1f} ms against {:.1f} ms ({:.2f}x)", p99, v("static", "step_p99_ms"),
                   p99 / v("static", "step_p99_ms")));
  line("step p99 <= the best peer's", p99, best_p99, false,
       fmt::format("{:.1f} ms against {:.1f} ms", p99, best_p99));
  double rx = v(mine, "retrans_segs"), rs = v("static", "retrans_segs");
  double dx = v(mine, "dsack_segs"), ds = v("static", "dsack_segs");
  line("retransmits <= 1.5x static's", rx, 1.5 * rs, false,
       fmt::format("{:.0f} against {:.0f} ({:.2f}x); spurious (DSACKed) {:.0f} against {:.0f}", rx,
                   rs, rx / std::fmax(rs, 1), dx, ds));
  double rpc = v(mine, "rpc_p99_us"), rpc_s = v("static", "rpc_p99_us");
  line("control RPC p99 <= static's", rpc, rpc_s, false,
       fmt::format("{:.0f} us against {:.0f} us", rpc, rpc_s));
  return out;
}

// What the rails allow a step, from the workload's own round of bursts: a
// step moves its dispatch round, then its combine round (the same sizes back),
// and spends the rest of its time elsewhere (the server, the scheduler of the
// machine): that rest is single's step p50 less its two rounds on rail0.
// Against these floors the step goals can be read: a goal below the floor
// of whole bursts cannot be met by placing whole bursts. Estimates: the
// rounds leave out other traffic, and the rest is single's.
json print_floors(const std::vector<json>& runs, const std::vector<json>& sums, const Opts& o) {
  json w;
  for (auto& r : runs)
    if (r.value("complete", false)) {
      w = r["client"]["workload"];
      break;
    }
  double single_p50 = NAN, static_p50 = NAN, static_p99 = NAN;
  for (auto& s : sums) {
    auto v = [&](const char* k) {
      return s.contains(k) && s[k].is_number() ? s[k].get<double>() : NAN;
    };
    if (s["mode"] == "single") single_p50 = v("step_p50_ms");
    if (s["mode"] == "static") static_p50 = v("step_p50_ms"), static_p99 = v("step_p99_ms");
  }
  if (!w.is_object() || !std::isfinite(single_p50)) return nullptr;
  const auto n = w.value("dispatch", 0);
  const double skew = w.value("skew", 0.0);
  const uint64_t burst = w.value("burst", uint64_t{0});
  auto sizes =
      dpload::skewed_sizes(burst * static_cast<uint64_t>(n), static_cast<size_t>(n), skew, 0);
  auto f = dpload::round_floor(sizes, o.cap0, o.cap1);
  const double rest = single_p50 - 2e3 * f.one_rail_s;
  const double shared = rest + 2e3 * f.shared_s, whole = rest + 2e3 * f.whole_bursts_s;
  std::string list;
  for (auto b : sizes) list += fmt::format("{}{:.2f}", list.empty() ? "" : "/", b / 1048576.0);
  std::printf(
      "\nstep floors (a step: its dispatch round of %d bursts of %s MiB, then its combine round "
      "of the same;\n single's step p50 %.1f ms = %.1f ms of the two rounds on rail0 + %.1f ms "
      "of the rest):\n",
      n, list.c_str(), single_p50, 2e3 * f.one_rail_s, rest);
  std::printf(
      "  every byte shared over both rails (an ideal multipath transport)  %6.1f ms"
      "  (%.2fx static's p50)\n",
      shared, shared / static_p50);
  std::printf(
      "  each burst whole, the best split of every round                    %6.1f ms"
      "  (%.2fx static's p50)\n",
      whole, whole / static_p50);
  std::printf("  the goal step p99 <= 0.85x static's                                %6.1f ms\n",
              0.85 * static_p99);
  std::printf(
      "  (estimates: the rounds leave out param-sync and logs, and the rest is single's, "
      "which\n  includes its waits behind them)\n");
  return {{"rest_ms", rest},
          {"shared_ms", shared},
          {"whole_bursts_ms", whole},
          {"burst_bytes", sizes},
          {"goal_p99_ms", 0.85 * static_p99}};
}

void print_peers(const Opts& o) {
  std::printf(
      "\nhow each mode is set up (tools/dp-lab mode):\n"
      "  single    everything over rail0 (the service route), no dualpathd\n"
      "  static    dualpathd, scheduler mode static: each class on its policy rail\n"
      "  ecmp      a multipath route over both rails, weights in the rails' ratio (%s:%s),\n"
      "            L4 hashing (fib_multipath_hash_policy=1), both nodes\n"
      "  mptcp     the kernel's MPTCP: a subflow endpoint on a's rail1 address, a signal\n"
      "            endpoint on b's, limits subflow 2 add_addr_accepted 2, both nodes\n"
      "  dualpath  dualpathd, adaptive, as the policy's defaults: decisions on smoothed\n"
      "            rates, split classes by flowlets\n"
      "  cells     dualpathd, adaptive with burst placement: decisions on 100 ms peaks,\n"
      "            a 1 s hold, split elastic classes by 16 KiB flowcells where they\n"
      "            finish first, a flow's cells kept in order (flowcell_order keep)\n"
      "  cells-any the same, cells free to overtake their own flow (flowcell_order any)\n"
      "  bursts    dualpathd, adaptive with burst placement: decisions on 100 ms peaks, a 1 s\n"
      "            hold, split elastic classes placed a whole burst at a time, each flow's\n"
      "            next burst where the daemon's plan finishes the round soonest\n"
      "  static, dualpath and cells run the lab policies with expert-dispatch elastic and the\n"
      "  paths' capacities at the rails' rates (dp-lab bench_policies)\n",
      dp::format_bandwidth(o.cap0).c_str(), dp::format_bandwidth(o.cap1).c_str());
}

// Per-rail utilisation over time, one panel per mode (the first round's run).
void write_svg(const std::string& file, const std::vector<json>& runs,
               const std::vector<std::string>& modes) {
  const int W = 720, H = 140, pad = 40;
  std::ofstream s(file);
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W + 2 * pad << "' height='"
    << modes.size() * (H + pad) + pad << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n";
  int row = 0;
  for (auto& m : modes) {
    const json* run = nullptr;
    for (auto& r : runs)
      if (r["mode"] == m && r.value("complete", false)) {
        run = &r;
        break;
      }
    double y0 = pad + row * (H + pad);
    s << "<text x='" << pad << "' y='" << y0 - 6 << "' font-weight='bold'>" << m
      << " (utilisation per rail, both directions)</text>\n"
      << "<rect x='" << pad << "' y='" << y0 << "' width='" << W << "' height='" << H
      << "' fill='none' stroke='#999'/>\n";
    for (int g : {25, 50, 75, 100})
      s << "<line x1='" << pad << "' x2='" << pad + W << "' y1='" << y0 + H - H * g / 100.0
        << "' y2='" << y0 + H - H * g / 100.0 << "' stroke='#eee'/><text x='" << 4 << "' y='"
        << y0 + H - H * g / 100.0 + 4 << "'>" << g << "%</text>\n";
    if (run) {
      const json& ser = (*run)["utilisation"]["series"];
      double tmax = 1;
      for (auto& p : ser) tmax = std::max(tmax, p[0].get<double>());
      const char* colour[2] = {"#1f77b4", "#d62728"};
      for (int r = 0; r < 2; ++r) {
        s << "<polyline fill='none' stroke='" << colour[r] << "' stroke-width='1.5' points='";
        for (auto& p : ser)
          s << pad + W * p[0].get<double>() / tmax << ","
            << y0 + H - H * std::min(1.05, p[r + 1].get<double>()) << " ";
        s << "'/>\n<text x='" << pad + W - 60 << "' y='" << y0 + 14 + 14 * r << "' fill='"
          << colour[r] << "'>rail" << r << "</text>\n";
      }
      s << "<text x='" << pad + W - 20 << "' y='" << y0 + H + 14 << "'>" << std::lround(tmax)
        << "s</text>\n";
    }
    ++row;
  }
  s << "</svg>\n";
}

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{"dp-lab bench - the A/B benchmark: one workload in every mode"};
  app.add_option("--modes", o.modes, "modes to run")->delimiter(',')->capture_default_str();
  app.add_option("--rounds", o.rounds, "rounds (modes alternate in each)")->capture_default_str();
  app.add_option("--duration", o.duration, "per run")->capture_default_str();
  app.add_flag("--quick", o.quick, "a few seconds per mode, one round (CI)");
  app.add_option("--workload", o.workloads, "default, overlap, equal (dp-lab-bench.1)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("--suite", o.suite, "every workload: default, overlap and equal rails");
  app.add_option("--seed", o.seed, "dp-load seed, the same in every mode")->capture_default_str();
  app.add_option("--out", o.out, "directory for JSON, SVG and logs (default: bench-<time>)");
  app.add_option("--fault", o.faults, "blackhole:rail0@5s, down:rail0@5s, loss:rail0:30%@5s");
  app.add_option("--sweep", o.sweep, "concurrency or rate: load sweep and capacity at SLO")
      ->check(CLI::IsMember({"", "concurrency", "rate"}));
  app.add_option("--slo", o.slo, "step-time p99 target for capacity at SLO")->capture_default_str();
  app.add_option("--rates", o.rates, "steps/s for --sweep rate")->delimiter(',');
  app.add_option("--concurrencies", o.concurrencies, "steps in flight for --sweep concurrency")
      ->delimiter(',');
  app.add_option("--dp-lab", o.dp_lab, "path of tools/dp-lab")->required();
  app.add_option("--dp-load", o.dp_load, "path of dp-load")->required();
  app.footer("Options for dp-load go after \"--\": dp-lab bench --rounds 5 -- --burst 4MiB");
  // only what follows "--" goes to dp-load: a misspelt option of the bench
  // is refused, never passed on (and the run made without it)
  int own = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      own = i;
      for (int j = i + 1; j < argc; ++j) o.load_args.emplace_back(argv[j]);
      break;
    }
  CLI11_PARSE(app, own, argv);
  for (auto& f : o.faults)
    if (!parse_fault(f)) {
      std::fprintf(stderr,
                   "dp-lab bench: bad --fault \"%s\" (blackhole:rail0@5s, down:rail0@5s, "
                   "loss:rail0:30%%@5s)\n",
                   f.c_str());
      return 2;
    }
  auto slo = dp::parse_duration(o.slo);
  if (!slo) {
    std::fprintf(stderr, "dp-lab bench: --slo: %s\n", slo.error().what().c_str());
    return 2;
  }
  if (o.quick) {
    o.rounds = 1;
    o.duration = "3s";
  }
  if (o.out.empty()) o.out = "bench-" + std::to_string(std::time(nullptr));
  fs::create_directories(o.out);
  o.out = fs::absolute(o.out).string();
  if (run("ip netns list | grep -qw dpl-a") != 0 && run(o.dp_lab + " up --no-daemon") != 0) {
    std::fprintf(stderr, "dp-lab bench: cannot bring the lab up\n");
    return 1;
  }

  std::vector<Workload> todo;
  if (o.suite) {
    todo = all_workloads();
  } else {
    for (auto& name : o.workloads) {
      auto it = std::find_if(all_workloads().begin(), all_workloads().end(),
                             [&](const Workload& w) { return w.name == name; });
      if (it == all_workloads().end()) {
        std::fprintf(stderr, "dp-lab bench: unknown workload \"%s\" (default, overlap, equal)\n",
                     name.c_str());
        return 2;
      }
      todo.push_back(*it);
    }
  }
  auto base_args = std::vector<std::string>{"--duration", o.duration};
  // the lab's rates: a workload on other rates brings the lab up anew
  auto lab_rates = [&] {
    std::ifstream in("/run/dualpath-lab/rates");
    std::string a, b;
    in >> a >> b;
    return std::pair<std::string, std::string>{a, b};
  };
  auto ensure_rates = [&](const std::string& r0, const std::string& r1) {
    if (lab_rates() == std::pair<std::string, std::string>{r0, r1}) return true;
    run(o.dp_lab + " down");
    return run(o.dp_lab + " up --no-daemon --rail0 " + r0 + " --rail1 " + r1) == 0;
  };
  std::vector<json> runs, sums;
  json per_workload = json::array();
  for (auto& w : todo) {
    if (!ensure_rates(w.rail0, w.rail1)) {
      std::fprintf(stderr, "dp-lab bench: cannot bring the lab up at %s and %s\n", w.rail0.c_str(),
                   w.rail1.c_str());
      return 1;
    }
    o.cap0 = bits(w.rail0);
    o.cap1 = bits(w.rail1);
    auto args = base_args;
    args.insert(args.end(), w.args.begin(), w.args.end());
    std::vector<json> wruns;
    for (int r = 0; r < o.rounds; ++r) {
      for (size_t i = 0; i < o.modes.size(); ++i) {
        const auto& m = o.modes[(i + static_cast<size_t>(r)) % o.modes.size()];  // rotate
        std::fprintf(stderr, "dp-lab bench: %s, round %d/%d, %s\n", w.name.c_str(), r + 1, o.rounds,
                     m.c_str());
        json one = run_one(o, m, r, args, w.name);
        one["workload"] = w.name;
        wruns.push_back(one);
      }
    }
    std::vector<json> wsums;
    for (auto& m : o.modes) wsums.push_back(summarise(wruns, m));
    std::string argline;
    for (auto& a : w.args) argline += " " + a;
    std::printf(
        "\n== workload %s: rail0 %s, rail1 %s, dp-load client%s --duration %s, %d round%s\n",
        w.name.c_str(), w.rail0.c_str(), w.rail1.c_str(), argline.c_str(), o.duration.c_str(),
        o.rounds, o.rounds == 1 ? "" : "s");
    print_table(wsums, !o.faults.empty());
    json floors = print_floors(wruns, wsums, o);
    json goals = {{"dualpath", print_goals(wsums, o, "dualpath")},
                  {"cells", print_goals(wsums, o, "cells")},
                  {"bursts", print_goals(wsums, o, "bursts")}};
    write_svg(o.out + "/utilisation-" + w.name + ".svg", wruns, o.modes);
    per_workload.push_back({{"workload", w.name},
                            {"rail0", w.rail0},
                            {"rail1", w.rail1},
                            {"args", w.args},
                            {"summary", wsums},
                            {"floors", floors},
                            {"goals", goals}});
    runs.insert(runs.end(), wruns.begin(), wruns.end());
    sums.insert(sums.end(), wsums.begin(), wsums.end());
  }
  if (!ensure_rates(todo.front().rail0, todo.front().rail1)) return 1;
  o.cap0 = bits(todo.front().rail0);
  o.cap1 = bits(todo.front().rail1);
  print_peers(o);  // (ECMP's weights: of the first workload's rails)
  // sweeps: the first workload's arguments
  base_args.insert(base_args.end(), todo.front().args.begin(), todo.front().args.end());

  json sweep = nullptr;
  if (!o.sweep.empty()) {
    sweep = json::object();
    double slo_ms = std::chrono::duration<double, std::milli>(*slo).count();
    for (auto& m : o.modes) {
      json pts = json::array();
      json best = nullptr;
      size_t n = o.sweep == "rate" ? o.rates.size() : o.concurrencies.size();
      for (size_t k = 0; k < n; ++k) {
        std::vector<std::string> extra = base_args;
        std::string load;
        if (o.sweep == "rate") {
          extra.insert(extra.end(), {"--rate", fmt::format("{}", o.rates[k])});
          load = fmt::format("{} steps/s", o.rates[k]);
        } else {
          extra.insert(extra.end(), {"--concurrency", std::to_string(o.concurrencies[k])});
          load = fmt::format("{} in flight", o.concurrencies[k]);
        }
        std::fprintf(stderr, "dp-lab bench: sweep %s, %s\n", m.c_str(), load.c_str());
        json r = run_one(o, m, 0, extra, "sweep" + std::to_string(k));
        double p99 = num(r, {"client", "steps", "time_ms", "p99"});
        double done = num(r, {"client", "steps", "completed"});
        double secs = num(r, {"client", "duration_s"});
        json pt = {{"load", load},
                   {"step_p99_ms", p99},
                   {"steps_per_s", done / secs},
                   {"goodput_bps", num(r, {"client", "goodput_bps"})}};
        pts.push_back(pt);
        if (p99 <= slo_ms &&
            (best.is_null() || pt["steps_per_s"].get<double>() > best["steps_per_s"].get<double>()))
          best = pt;
      }
      sweep[m] = {{"points", pts}, {"capacity_at_slo", best}};
    }
  }
  run(o.dp_lab + " mode single");

  json all = {{"seed", o.seed},     {"rounds", o.rounds}, {"duration", o.duration},
              {"faults", o.faults}, {"modes", o.modes},   {"workloads", per_workload},
              {"runs", runs},       {"sweep", sweep}};
  std::ofstream(o.out + "/bench.json") << all.dump(1) << "\n";
  if (!sweep.is_null()) {
    std::printf("\ncapacity at SLO (step p99 <= %s), %s sweep:\n", o.slo.c_str(), o.sweep.c_str());
    for (auto& m : o.modes) {
      const json& b = sweep[m]["capacity_at_slo"];
      std::printf(
          "  %-9s %s\n", m.c_str(),
          b.is_null()
              ? "none of the loads met the SLO"
              : fmt::format("{:.1f} steps/s at {} (p99 {:.1f} ms)", b["steps_per_s"].get<double>(),
                            b["load"].get<std::string>(), b["step_p99_ms"].get<double>())
                    .c_str());
    }
  }
  std::printf("\nJSON: %s/bench.json   pictures: %s/utilisation-WORKLOAD.svg\n", o.out.c_str(),
              o.out.c_str());

  // exit status: every mode ran and produced complete JSON; no data lost
  int bad = 0;
  for (auto& r : runs) {
    if (!r.value("complete", false)) {
      std::fprintf(stderr, "dp-lab bench: %s round %d incomplete: %s\n",
                   r["mode"].get<std::string>().c_str(), r["round"].get<int>(),
                   r.value("error", "see its log").c_str());
      ++bad;
    } else if (r["data_lost"].get<uint64_t>()) {
      std::fprintf(stderr, "dp-lab bench: %s round %d: %llu checksum errors\n",
                   r["mode"].get<std::string>().c_str(), r["round"].get<int>(),
                   static_cast<unsigned long long>(r["data_lost"].get<uint64_t>()));
      ++bad;
    }
  }
  return bad ? 1 : 0;
}

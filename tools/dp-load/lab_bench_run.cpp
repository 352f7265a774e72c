// SPDX-License-Identifier: Apache-2.0
// dp-lab bench's runner (lab_bench.h).
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "dualpath/client/control_socket.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/units.h"
#include "dualpath/kernel/linkstats.h"
#include "dualpath/kernel/procfs.h"
#include "lab_bench.h"

namespace bench {

using Clock = std::chrono::steady_clock;

// bulkN: param-sync (elastic, preferring rail1) as N connections that write
// for the whole run, with control RPCs beside it; nothing else.
Workload bulk(int streams) {
  return {
      "bulk" + std::to_string(streams),
      "1gbit",
      "250mbit",
      {"--workload", "rpc,sync", "--sync-streams", std::to_string(streams), "--sync-size", "4MiB"},
      streams};
}

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
      bulk(1),
      bulk(8),
      bulk(32),
  };
  return w;
}

std::vector<Workload> suite_workloads() {
  std::vector<Workload> w;
  for (const char* n : {"default", "overlap", "equal", "bulk8"})
    w.push_back(find_workload(n)->front());
  return w;
}

std::optional<std::vector<Workload>> find_workload(const std::string& name) {
  for (const auto& w : all_workloads())
    if (w.name == name) return std::vector<Workload>{w};
  if (name == "bulk") return std::vector<Workload>{bulk(1), bulk(8), bulk(32)};
  if (name.size() > 4 && name.size() <= 6 && name.rfind("bulk", 0) == 0 &&
      std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    int n = std::atoi(name.c_str() + 4);
    if (n >= 1 && n <= kMaxStreams) return std::vector<Workload>{bulk(n)};
  }
  return std::nullopt;
}

const std::vector<std::string>& topology_modes(const std::string& topology) {
  // (bursts, the same as dualpath's defaults written out, runs when asked for)
  static const std::vector<std::string> shared{"single", "static",    "ecmp",
                                               "mptcp",  "dualpath",  "flowlets",
                                               "cells",  "cells-any", "multipath"};
  static const std::vector<std::string> separate{"single", "static", "mptcp", "dualpath",
                                                 "multipath"};
  return topology == "separate" ? separate : shared;
}

// What a shell command prints on stdout (its stderr discarded); in network
// namespace ns when one is given.
std::string output_of(const std::string& cmd, const std::string& ns = "") {
  std::string full = ns.empty() ? cmd : "nsenter --net=/run/netns/" + ns + " -- " + cmd;
  FILE* f = popen((full + " 2>/dev/null").c_str(), "r");
  if (!f) return "";
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  pclose(f);
  return s;
}

std::optional<Lab> Lab::describe(const std::string& dp_lab) {
  json j = json::parse(output_of(dp_lab + " describe"), nullptr, false);
  if (!j.is_object() || !j.contains("nodes") || !j.contains("rails")) return std::nullopt;
  Lab lab;
  lab.topology = j.value("topology", "shared");
  lab.a = j["nodes"].value("a", "");
  lab.b = j["nodes"].value("b", "");
  lab.rails = {j["rails"][0].get<std::string>(), j["rails"][1].get<std::string>()};
  lab.peer = j.value("peer", "");
  if (j["rates"].is_array() && j["rates"][0].is_string())
    lab.rates = std::array<std::string, 2>{j["rates"][0].get<std::string>(),
                                           j["rates"][1].get<std::string>()};
  // the namespaces take the machine's default congestion control, which the
  // figures depend on (BBR paces a flow at the rate it last measured)
  if (auto pol = dp::load_policy_file(j.value("policy_a", "")); pol.ok()) {
    if (auto v = pol.policy->qos.ack_skb_priority)
      lab.ack_priority =
          *v < 8 ? std::to_string(*v) : fmt::format("{:x}:{:x}", *v >> 16, *v & 0xffff);
  }
  lab.congestion_control = output_of("cat /proc/sys/net/ipv4/tcp_congestion_control", lab.a);
  while (!lab.congestion_control.empty() &&
         std::isspace(static_cast<unsigned char>(lab.congestion_control.back())))
    lab.congestion_control.pop_back();
  return lab;
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
  uint64_t at_start[2][2] = {}, latest[2][2] = {};  // [node][rail] bytes, at start and end
  std::atomic<bool> stop{false};
  std::thread th;
  void start(const Lab& lab) {
    th = std::thread([this, lab] {
      // one reader per namespace: a netlink socket belongs to the netns it was made in
      std::unique_ptr<dp::LinkStatsReader> rd[2];
      int idx[2][2];
      int self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
      for (int n = 0; n < 2; ++n) {
        int fd = open(("/run/netns/" + (n ? lab.b : lab.a)).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return;
        close(fd);
        rd[n] = std::make_unique<dp::LinkStatsReader>();
        // now, in the node's namespace (a socket stays in the one it was made in)
        if (!rd[n]->open()) return;
        idx[n][0] = static_cast<int>(if_nametoindex(lab.rails[0].c_str()));
        idx[n][1] = static_cast<int>(if_nametoindex(lab.rails[1].c_str()));
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
        if (first) std::memcpy(at_start, cur, sizeof(cur));
        std::memcpy(latest, cur, sizeof(cur));
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
  // Bytes each node sent on each rail while it ran: {"a": {"rail0": n, ...}, "b": ...}.
  json sent(const Lab& lab) const {
    json out = json::object();
    for (int n = 0; n < 2; ++n)
      for (int r = 0; r < 2; ++r)
        out[n ? "b" : "a"][lab.rails[static_cast<size_t>(r)]] = latest[n][r] - at_start[n][r];
    return out;
  }
};

// The daemons' classes while the workload runs (the modes with dualpathd):
// each class's decided shares every 200 ms, time-weighted (a share holds
// until the next sample), and its per-rail transmit counters at the start
// and at the end. A node whose daemon does not answer has no classes.
struct ClassSampler {
  struct Node {
    std::string sock;
    json first, last;  // class list at the start and at the end
    std::map<std::string, std::map<std::string, double>> share_s;  // class -> rail -> % x s
    std::map<std::string, double> secs;                            // class -> s sampled
  };
  std::array<Node, 2> nodes;
  std::atomic<bool> stop{false};
  std::thread th;

  static json list(const std::string& sock) {
    auto r = dp::call(sock, {{"cmd", "class.list"}, {"args", json::object()}}, 1000);
    if (!r.ok() || !r->value("ok", false) || !(*r)["data"].is_array()) return nullptr;
    return (*r)["data"];
  }

  void start(const Lab& lab) {
    nodes[0].sock = "/run/dualpath/" + lab.a + ".sock";
    nodes[1].sock = "/run/dualpath/" + lab.b + ".sock";
    for (auto& n : nodes) n.first = list(n.sock);
    if (nodes[0].first.is_null() && nodes[1].first.is_null()) return;  // no daemon
    th = std::thread([this] {
      Clock::time_point prev[2];
      json prev_list[2];
      for (int k = 0; k < 2; ++k) prev[k] = Clock::now(), prev_list[k] = nodes[k].first;
      for (bool last = false; !last;) {
        for (int i = 0; i < 4 && !stop; ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        last = stop;
        for (int k = 0; k < 2; ++k) {
          Node& n = nodes[k];
          if (n.first.is_null()) continue;
          json cur = list(n.sock);
          auto now = Clock::now();
          if (cur.is_null()) continue;
          // the shares the previous sample saw held until this one
          double dt = std::chrono::duration<double>(now - prev[k]).count();
          for (auto& c : prev_list[k]) {
            const std::string name = c.value("name", "");
            if (!c["shares"].is_object()) continue;
            for (auto& [rail, v] : c["shares"].items())
              if (v.is_number()) n.share_s[name][rail] += v.get<double>() * dt;
            n.secs[name] += dt;
          }
          prev[k] = now;
          prev_list[k] = cur;
          n.last = cur;
        }
      }
    });
  }
  void finish() {
    stop = true;
    if (th.joinable()) th.join();
  }
  // Per node, per class: the bytes it sent on each rail while the workload
  // ran, and the decided share of each rail (%, time-weighted).
  json classes() const {
    json out = json::object();
    for (int k = 0; k < 2; ++k) {
      const Node& n = nodes[static_cast<size_t>(k)];
      if (!n.first.is_array() || !n.last.is_array()) continue;
      json node = json::object();
      for (auto& c : n.last) {
        const std::string name = c.value("name", "");
        json before;
        for (auto& b : n.first)
          if (b.value("name", "") == name) before = b;
        json tx = json::object(), shares = json::object();
        if (c.contains("tx_bytes_by_path") && c["tx_bytes_by_path"].is_object())
          for (auto& [rail, v] : c["tx_bytes_by_path"].items()) {
            double b0 = before.is_object() && before["tx_bytes_by_path"].contains(rail)
                            ? before["tx_bytes_by_path"][rail].get<double>()
                            : 0;
            tx[rail] = v.get<double>() - b0;
          }
        auto it = n.share_s.find(name);
        auto st = n.secs.find(name);
        if (it != n.share_s.end() && st != n.secs.end() && st->second > 0)
          for (auto& [rail, ps] : it->second) shares[rail] = ps / st->second;
        node[name] = {{"tx_bytes_by_path", tx}, {"shares", shares}};
      }
      out[k ? "b" : "a"] = node;
    }
    return out;
  }
};

// What a command run in network namespace ns prints as JSON (discarded: none).
json json_in(const std::string& ns, const std::string& cmd) {
  return json::parse(output_of(cmd, ns), nullptr, false);
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
double qdisc_drops(const Lab& lab, const std::string& ns) {
  double drops = 0;
  for (const auto& dev : lab.rails) {
    json j = json_in(ns, "tc -s -j qdisc show dev " + dev);
    if (!j.is_array()) continue;
    for (auto& q : j)
      if (q.value("root", false) && q.contains("drops") && q["drops"].is_number())
        drops += q["drops"].get<double>();
  }
  return drops;
}

std::optional<Fault> parse_fault(const std::string& s, const Lab& lab) {
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
  if (f.rail != lab.rails[0] && f.rail != lab.rails[1]) return std::nullopt;
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
  for (const auto& ns : {o.lab.a, o.lab.b})
    for (const auto& r : o.lab.rails)
      run("nsenter --net=/run/netns/" + ns + " -- ip link set " + r + " up");
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
  // mptcp: the application asks for MPTCP; multipath: the class does (and
  // dp-load asks too, for a kernel that refuses the fmod_ret program that
  // would make its sockets MPTCP)
  const bool mptcp = mode == "mptcp" || mode == "multipath";
  // multipath: client and server in the class bench-mp (dp-lab bench_policies),
  // which makes their sockets MPTCP; their connections belong to the lab's
  // port classes, each multipath there, with its own decision and QoS
  auto in_class = [&](const std::string& node, std::vector<std::string> argv) {
    if (mode != "multipath") return argv;
    std::vector<std::string> run{
        o.dpctl, "-s", "/run/dualpath/" + node + ".sock", "run", "--class", "bench-mp", "--"};
    run.insert(run.end(), argv.begin(), argv.end());
    return run;
  };
  std::string base = o.out + "/" + mode + "-" + tag + "-r" + std::to_string(round);
  std::vector<std::string> sargs{o.dp_load, "server", "--once", "--json", base + ".server.json"};
  if (mptcp) sargs.push_back("--mptcp");
  if (!o.congestion_control.empty())
    sargs.insert(sargs.end(), {"--congestion-control", o.congestion_control});
  sargs = in_class(o.lab.b, sargs);
  int sout = -1;
  pid_t server = spawn(o.lab.b, sargs, base + ".log", &sout);
  char c;
  std::string line;
  while (read(sout, &c, 1) == 1 && c != '\n') line += c;
  close(sout);
  if (line != "ready") {
    wait_exit(server, 5);
    r["error"] = "dp-load server did not start (" + base + ".log)";
    return r;
  }
  auto na = nstat(o.lab.a), nb = nstat(o.lab.b);
  const double qd0 = qdisc_drops(o.lab, o.lab.a) + qdisc_drops(o.lab, o.lab.b);
  Sampler sm;
  sm.start(o.lab);
  ClassSampler cls;
  cls.start(o.lab);
  std::vector<std::string> cargs{o.dp_load,      "client", "--connect",
                                 o.lab.peer,     "-q",     "--json",
                                 base + ".json", "--seed", std::to_string(o.seed)};
  // each step's time and each combine's arrival: what held a slow step back
  cargs.insert(cargs.end(), {"--steps", base + ".steps.jsonl"});
  if (mptcp) cargs.push_back("--mptcp");
  if (!o.congestion_control.empty())
    cargs.insert(cargs.end(), {"--congestion-control", o.congestion_control});
  for (auto& a : o.load_args) cargs.push_back(a);
  for (auto& a : extra) cargs.push_back(a);
  cargs = in_class(o.lab.a, cargs);
  int cout_fd = -1;
  auto cpu0 = dp::cpu_times(true);
  auto t0 = Clock::now();
  pid_t client = spawn(o.lab.a, cargs, base + ".log", &cout_fd);
  std::vector<Fault> fs;
  for (auto& s : o.faults)
    if (auto f = parse_fault(s, o.lab)) fs.push_back(*f);
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
  cls.finish();
  clear_faults(o);
  int src = wait_exit(server, 40);
  auto ea = nstat(o.lab.a), eb = nstat(o.lab.b);
  const double qd1 = qdisc_drops(o.lab, o.lab.a) + qdisc_drops(o.lab, o.lab.b);
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
  // where each node's bytes went: the links' counters (every class, and the
  // ACKs of what the other node sent), and with a daemon each class's own
  r["links_sent_bytes"] = sm.sent(o.lab);
  r["classes"] = cls.classes();
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

}  // namespace bench

// SPDX-License-Identifier: Apache-2.0
// dp-lab bench (tools/dp-lab bench): the same dp-load workload, with the
// same seed, in each mode, alternating modes and repeating. Its parts:
//   lab_bench_run.cpp     the runner: the lab as `dp-lab describe` gives it,
//                         one run of a workload in one mode, faults, samplers;
//   lab_bench_report.cpp  the report: medians over rounds, the table, the
//                         goals and the step floors;
//   lab_bench_svg.cpp     the picture: per-rail utilisation over time;
//   dp_lab_bench.cpp      the command line and the order of the runs.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "load_core.h"

namespace bench {

using dpload::json;

// The lab as `dp-lab describe` says it is: nothing about it is copied here.
struct Lab {
  std::string topology, a, b;                       // node namespaces
  std::array<std::string, 2> rails;                 // interface names, the same on both nodes
  std::string peer;                                 // b's address for the workload
  std::optional<std::array<std::string, 2>> rates;  // unshaped: none
  std::string congestion_control;                   // node a's default (the workload's TCP runs it)
  // The skb_priority the lab policies' [qos] stamps on pure ACKs ("1:5"); ""
  // for none: a class's ACKs are stamped as its data.
  std::string ack_priority;
  static std::optional<Lab> describe(const std::string& dp_lab);
};

// The modes each topology has (dp-lab mode): the separate topology has no
// route for ECMP over both rails and no connection whose packets can be split.
const std::vector<std::string>& topology_modes(const std::string& topology);

struct Opts {
  std::vector<std::string> modes;  // default: topology_modes(topology)
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
  std::string congestion_control;      // every workload socket's; "": the namespaces' default
  std::string dp_lab, dp_load, dpctl;
  std::string topology;      // shared or separate; default: the lab's, else shared
  std::string rail0, rail1;  // the rails' rates, for every workload (default: the workload's)
  Lab lab;                   // as dp-lab describes it
  double cap0 = 1e9, cap1 = 250e6;  // of the workload being run
  std::vector<std::string> workloads{"default"};
  bool suite = false;
};

// The workloads the goals were set for: the rates the lab is brought up at
// and dp-load's arguments. "default": four dispatch and four combine connections, 1 MiB
// each a step on average but skewed by expert popularity (1/rank), the
// hottest expert changing every 2 s; param-sync in bursts that come and go
// (4 MiB every 250 ms for 2 s, then 3 s of nothing), logs at 20 Mbit/s,
// control RPCs at 500/s. A fixed split is wrong part of the time: rail1 is
// busy while param-sync is on and idle while it is off. "overlap": the same,
// two steps in flight (one step's dispatch runs while the previous one's
// combine returns: both directions busy). "equal": the default on two
// 1 Gbit rails. "bulkN" (N 1 to 64; bulk1, bulk8 and bulk32 listed): param-sync
// as N connections that each write for the whole run, as a bulk transfer does
// (a parameter or KV-cache sync, iperf3 -P N), beside control RPCs: a class
// that alone could fill both rails, so whether its decision is carried out
// shows in its goodput and in where its bytes went.
struct Workload {
  std::string name, rail0, rail1;
  std::vector<std::string> args;
  int streams = 0;  // bulk: param-sync's continuous connections
};
inline constexpr int kMaxStreams = 64;

const std::vector<Workload>& all_workloads();
// --suite: default, overlap, equal, bulk8
std::vector<Workload> suite_workloads();
// A --workload name: one of all_workloads(), bulkN, or "bulk" (bulk1, bulk8,
// bulk32); nullopt when it is none.
std::optional<std::vector<Workload>> find_workload(const std::string& name);

struct Fault {
  std::string kind, rail;
  int percent = 0;
  double at_s = 0;
};

// ---- the runner (lab_bench_run.cpp)
double bits(const std::string& rate);
int run(const std::string& cmd);  // a shell command, quietly; its exit code
std::optional<Fault> parse_fault(const std::string& s, const Lab& lab);
// One run of the workload in one mode (dp-lab mode MODE, a server on b, the
// client on a, samplers, faults); every figure of it as JSON.
json run_one(const Opts& o, const std::string& mode, int round,
             const std::vector<std::string>& extra, const std::string& tag);

// ---- the report (lab_bench_report.cpp)
double median(std::vector<double> v);
double num(const json& j, std::initializer_list<const char*> path);
json summarise(const std::vector<json>& runs, const std::string& mode);
void print_table(const std::vector<json>& sums, bool faults);
// bulk workloads (w.streams > 0): goodput against both rails' capacity; the
// others against the other modes; both: carried share against decided
json print_goals(const std::vector<json>& sums, const Opts& o, const std::string& mine,
                 const Workload& w);
// Where each mode's bytes went, per class and node: carried against decided.
void print_shares(const std::vector<json>& sums);
json print_floors(const std::vector<json>& runs, const std::vector<json>& sums, const Opts& o);
void print_peers(const Opts& o);

// ---- the picture (lab_bench_svg.cpp)
void write_svg(const std::string& file, const std::vector<json>& runs,
               const std::vector<std::string>& modes);

}  // namespace bench

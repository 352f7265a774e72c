// SPDX-License-Identifier: Apache-2.0
// dp-lab bench: the command line and the order of the runs (lab_bench.h has
// the parts). Run through `tools/dp-lab bench` (it sets the paths); needs
// root and the lab up without daemons (`dp-lab up --no-daemon`, which it
// does if the lab is down); leaves it in mode single.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "dualpath/core/units.h"
#include "lab_bench.h"

namespace fs = std::filesystem;
using namespace bench;

namespace {

// The lab in the bench's topology at a workload's rates (or the rates the
// command line gives): brought up anew when it is in another or runs at others.
bool ensure_rates(Opts& o, std::string r0, std::string r1) {
  if (!o.rail0.empty()) r0 = o.rail0;
  if (!o.rail1.empty()) r1 = o.rail1;
  if (o.lab.topology != o.topology || !o.lab.rates ||
      *o.lab.rates != std::array<std::string, 2>{r0, r1}) {
    run(o.dp_lab + " down");
    if (run(o.dp_lab + " up --no-daemon --topology " + o.topology + " --rail0 " + r0 + " --rail1 " +
            r1) != 0)
      return false;
    auto lab = Lab::describe(o.dp_lab);
    if (!lab) return false;
    o.lab = *lab;
    if (!o.congestion_control.empty()) o.lab.congestion_control = o.congestion_control;
  }
  o.cap0 = bits(r0);
  o.cap1 = bits(r1);
  return true;
}

// Every workload asked for, each in every mode for every round (the modes
// rotate from round to round); its table, floors, goals and picture.
std::optional<json> run_suite(Opts& o, const std::vector<Workload>& to_run,
                              const std::vector<std::string>& base_args, std::vector<json>& runs) {
  json per_workload = json::array();
  for (auto w : to_run) {
    if (!ensure_rates(o, w.rail0, w.rail1)) {
      std::fprintf(stderr, "dp-lab bench: cannot bring the %s lab up at %s and %s\n",
                   o.topology.c_str(), w.rail0.c_str(), w.rail1.c_str());
      return std::nullopt;
    }
    w.rail0 = *o.lab.rates->begin();  // what it ran at
    w.rail1 = o.lab.rates->back();
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
        "\n== workload %s, %s topology: %s %s, %s %s, dp-load client%s --duration %s, "
        "%d round%s\n",
        w.name.c_str(), o.lab.topology.c_str(), o.lab.rails[0].c_str(), w.rail0.c_str(),
        o.lab.rails[1].c_str(), w.rail1.c_str(), argline.c_str(), o.duration.c_str(), o.rounds,
        o.rounds == 1 ? "" : "s");
    print_table(wsums, !o.faults.empty());
    print_shares(wsums);
    // the step floors are the MoE steps': a bulk workload has none
    json floors = w.streams > 0 ? json(nullptr) : print_floors(wruns, wsums, o);
    json goals = json::object();
    for (const char* m : {"dualpath", "flowlets", "multipath"})
      goals[m] = print_goals(wsums, o, m, w);
    write_svg(o.out + "/utilisation-" + w.name + ".svg", wruns, o.modes);
    per_workload.push_back({{"workload", w.name},
                            {"topology", o.lab.topology},
                            {"congestion_control", o.lab.congestion_control},
                            {"ack_priority", o.lab.ack_priority},
                            {"rail0", w.rail0},
                            {"rail1", w.rail1},
                            {"args", w.args},
                            {"sync_streams", w.streams},
                            {"summary", wsums},
                            {"floors", floors},
                            {"goals", goals}});
    runs.insert(runs.end(), wruns.begin(), wruns.end());
  }
  return per_workload;
}

// A load sweep of every mode (--sweep rate|concurrency) and each mode's
// capacity at the SLO: the most steps/s whose step p99 met it.
json run_sweep(const Opts& o, const std::vector<std::string>& base_args, double slo_ms) {
  json sweep = json::object();
  {
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
  return sweep;
}

// Exit status: every mode ran and produced complete JSON; no data lost.
int check_runs(const std::vector<json>& runs) {
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

}  // namespace

int main(int argc, char** argv) {
  Opts o;
  CLI::App app{"dp-lab bench - the A/B benchmark: one workload in every mode"};
  app.add_option("--modes", o.modes,
                 "modes to run (default: every mode of the topology: single, static, ecmp, "
                 "mptcp, dualpath, flowlets, cells, cells-any, multipath (and bursts when asked "
                 "for); "
                 "separate: single, static, mptcp, dualpath, multipath)")
      ->delimiter(',');
  app.add_option("--topology", o.topology,
                 "shared or separate (default: the lab's if it is up, else shared)")
      ->check(CLI::IsMember({"shared", "separate"}));
  app.add_option("--rail0", o.rail0, "rail0's rate for every workload (e.g. 10gbit)");
  app.add_option("--rail1", o.rail1, "rail1's rate for every workload");
  app.add_option("--rounds", o.rounds, "rounds (modes alternate in each)")->capture_default_str();
  app.add_option("--duration", o.duration, "per run")->capture_default_str();
  app.add_flag("--quick", o.quick, "a few seconds per mode, one round (CI)");
  app.add_option("--workload", o.workloads,
                 "default, overlap, equal, bulk1, bulk8, bulk32 (bulkN: param-sync as N "
                 "continuous streams, N 1 to 64; bulk: bulk1, bulk8 and bulk32; dp-load(1))")
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("--suite", o.suite, "the workloads default, overlap, equal and bulk8");
  app.add_option("--congestion-control", o.congestion_control,
                 "TCP congestion control of every workload socket, both ends (e.g. cubic; "
                 "default: the namespaces', which is the machine's)");
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
  app.add_option("--dpctl", o.dpctl, "path of dpctl (multipath mode)")->required();
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
  auto slo = dp::parse_duration(o.slo);
  if (!slo) {
    std::fprintf(stderr, "dp-lab bench: --slo: %s\n", slo.error().what().c_str());
    return 2;
  }
  // the workloads before anything is touched: a name that is none changes nothing
  std::vector<Workload> to_run;
  if (o.suite) {
    to_run = suite_workloads();
  } else {
    for (auto& name : o.workloads) {
      auto ws = find_workload(name);
      if (!ws) {
        std::fprintf(stderr,
                     "dp-lab bench: unknown workload \"%s\" (default, overlap, equal, bulk; "
                     "bulkN: N continuous param-sync streams, N from 1 to %d)\n",
                     name.c_str(), kMaxStreams);
        return 2;
      }
      to_run.insert(to_run.end(), ws->begin(), ws->end());
    }
  }
  if (o.quick) {
    o.rounds = 1;
    o.duration = "3s";
  }
  if (o.out.empty()) o.out = "bench-" + std::to_string(std::time(nullptr));
  fs::create_directories(o.out);
  o.out = fs::absolute(o.out).string();
  if (run("ip netns list | grep -qw dpl-a") != 0 &&
      run(o.dp_lab + " up --no-daemon" + (o.topology.empty() ? "" : " --topology " + o.topology)) !=
          0) {
    std::fprintf(stderr, "dp-lab bench: cannot bring the lab up\n");
    return 1;
  }
  auto lab = Lab::describe(o.dp_lab);
  if (!lab) {
    std::fprintf(stderr, "dp-lab bench: %s describe gave no description of the lab\n",
                 o.dp_lab.c_str());
    return 1;
  }
  o.lab = *lab;
  if (!o.congestion_control.empty()) o.lab.congestion_control = o.congestion_control;
  if (o.topology.empty()) o.topology = o.lab.topology;
  if (o.modes.empty()) o.modes = topology_modes(o.topology);
  for (auto& m : o.modes) {
    const auto& ok = topology_modes(o.topology);
    if (std::find(ok.begin(), ok.end(), m) == ok.end() &&
        !(m == "bursts" && o.topology == "shared")) {
      std::string list;
      for (auto& k : ok) list += (list.empty() ? "" : ", ") + k;
      std::fprintf(stderr, "dp-lab bench: mode \"%s\" is not one of the %s topology's (%s)\n",
                   m.c_str(), o.topology.c_str(), list.c_str());
      return 2;
    }
  }
  for (const auto* r : {&o.rail0, &o.rail1})
    if (!r->empty() && bits(*r) <= 0) {
      std::fprintf(stderr, "dp-lab bench: bad rate \"%s\" (e.g. 250mbit, 10gbit)\n", r->c_str());
      return 2;
    }
  for (auto& f : o.faults)
    if (!parse_fault(f, o.lab)) {
      std::fprintf(stderr,
                   "dp-lab bench: bad --fault \"%s\" (blackhole:%s@5s, down:%s@5s, "
                   "loss:%s:30%%@5s)\n",
                   f.c_str(), o.lab.rails[0].c_str(), o.lab.rails[0].c_str(),
                   o.lab.rails[0].c_str());
      return 2;
    }

  auto base_args = std::vector<std::string>{"--duration", o.duration};
  std::vector<json> runs;
  auto per_workload = run_suite(o, to_run, base_args, runs);
  if (!per_workload) return 1;
  if (!ensure_rates(o, to_run.front().rail0, to_run.front().rail1)) return 1;
  print_peers(o);  // (ECMP's weights: of the first workload's rails)
  // sweeps: the first workload's arguments
  base_args.insert(base_args.end(), to_run.front().args.begin(), to_run.front().args.end());
  json sweep = o.sweep.empty() ? json(nullptr)
                               : run_sweep(o, base_args,
                                           std::chrono::duration<double, std::milli>(*slo).count());
  run(o.dp_lab + " mode single");

  json all = {{"seed", o.seed},     {"rounds", o.rounds}, {"duration", o.duration},
              {"faults", o.faults}, {"modes", o.modes},   {"workloads", *per_workload},
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
  std::printf("each round's steps: %s/MODE-WORKLOAD-rN.steps.jsonl (dp-load(1), --steps)\n",
              o.out.c_str());

  return check_runs(runs);
}

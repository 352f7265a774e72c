// SPDX-License-Identifier: Apache-2.0
// dp-lab bench's report (lab_bench.h): medians over rounds per mode, the
// table, the goals of the dualpath modes against the others of the same run,
// and the step floors.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include <fmt/format.h>

#include "dualpath/core/units.h"
#include "lab_bench.h"

namespace bench {

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
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

// Where one run's bytes went, per node and class ("a/param-sync"), and per
// node over the links ("a/(links)"): each rail's share of what it sent (%),
// the class's decided share (%, time-weighted; none for the links) and the
// largest difference of the two over the rails (percentage points).
json run_shares(const json& r) {
  json out = json::object();
  auto pct = [](const json& bytes) {
    json s = json::object();
    double total = 0;
    for (auto& [k, v] : bytes.items()) total += v.get<double>();
    for (auto& [k, v] : bytes.items()) s[k] = total > 0 ? 100 * v.get<double>() / total : NAN;
    return std::pair{s, total};
  };
  if (r.contains("links_sent_bytes") && r["links_sent_bytes"].is_object())
    for (auto& [node, bytes] : r["links_sent_bytes"].items()) {
      auto [s, total] = pct(bytes);
      out[node + "/(links)"] = {{"carried", s}, {"bytes", total}};
    }
  if (!r.contains("classes") || !r["classes"].is_object()) return out;
  // a class's bytes both nodes sent: a node that sent under a tenth of
  // them (the ACKs of the other's data) is left out
  std::map<std::string, double> both;
  for (auto& [node, classes] : r["classes"].items())
    for (auto& [name, c] : classes.items()) both[name] += pct(c["tx_bytes_by_path"]).second;
  for (auto& [node, classes] : r["classes"].items())
    for (auto& [name, c] : classes.items()) {
      auto [s, total] = pct(c["tx_bytes_by_path"]);
      if (total <= 0 || total < 0.1 * both[name]) continue;
      json one = {{"carried", s}, {"bytes", total}};
      // without the daemon's shares (none read) nothing to compare
      if (c["shares"].is_object() && !c["shares"].empty()) {
        double off = 0;
        for (auto& [rail, v] : s.items()) {
          double d = c["shares"].contains(rail) ? c["shares"][rail].get<double>() : 0;
          off = std::max(off, std::fabs(v.get<double>() - d));
        }
        one["decided"] = c["shares"];
        one["off_pp"] = off;
      }
      out[node + "/" + name] = one;
    }
  return out;
}

// Median over rounds of each figure, per mode.
json summarise(const std::vector<json>& runs, const std::string& mode) {
  std::map<std::string, std::vector<double>> f;
  std::map<std::string, std::map<std::string, std::vector<double>>> shares;  // key -> figure
  for (auto& r : runs) {
    if (r["mode"] != mode || !r.value("complete", false)) continue;
    const json& c = r["client"];
    // the workload's goodput: its MoE steps' bytes, or without MoE (bulk)
    // the bytes param-sync's streams delivered
    const bool moe = get(c, {"workload", "moe"}) != json(false);
    const double sync_bps = num(c, {"stream", "sync_goodput_bps"});
    if (std::isfinite(sync_bps)) f["sync_bps"].push_back(sync_bps);
    f["goodput_bps"].push_back(moe ? num(c, {"goodput_bps"}) : sync_bps);
    if (moe) {
      f["step_p50_ms"].push_back(num(c, {"steps", "time_ms", "p50"}));
      f["step_p99_ms"].push_back(num(c, {"steps", "time_ms", "p99"}));
    }
    const json run = run_shares(r);
    for (auto& [key, sh] : run.items()) {
      for (auto& [rail, v] : sh["carried"].items())
        shares[key]["carried/" + rail].push_back(v.get<double>());
      if (sh.contains("decided"))
        for (auto& [rail, v] : sh["decided"].items())
          shares[key]["decided/" + rail].push_back(v.get<double>());
      if (sh.contains("off_pp")) shares[key]["off_pp"].push_back(sh["off_pp"].get<double>());
      shares[key]["bytes"].push_back(sh["bytes"].get<double>());
    }
    double warm = NAN;  // the slowest warm-up step (dp-load leaves them out of the step times)
    if (json w = get(c, {"steps", "warmup", "ms"}); w.is_array())
      for (auto& v : w)
        if (v.is_number())
          warm = std::isnan(warm) ? v.get<double>() : std::max(warm, v.get<double>());
    if (!std::isnan(warm)) f["warmup_max_ms"].push_back(warm);
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
  json sh = json::object();
  for (auto& [key, figs] : shares)
    for (auto& [fig, v] : figs) {
      auto slash = fig.find('/');
      if (slash == std::string::npos)
        sh[key][fig] = median(v);
      else
        sh[key][fig.substr(0, slash)][fig.substr(slash + 1)] = median(v);
    }
  s["shares"] = sh;
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
    auto of_single = [&](const char* k) {  // NaN: no single, or it lacks the figure (bulk: steps)
      return single && single->contains(k) && (*single)[k].is_number() ? (*single)[k].get<double>()
                                                                       : NAN;
    };
    double gr = v("goodput_bps") / of_single("goodput_bps");
    double pr = v("step_p99_ms") / of_single("step_p99_ms");
    // a workload without MoE steps (bulk) has no step times: "-"
    auto ms = [](double x) {
      return std::isnan(x) ? fmt::format("{:>9}", "-") : fmt::format("{:7.1f}ms", x);
    };
    auto ratio = [](double x) {
      return std::isnan(x) ? fmt::format("{:>8}", "-") : fmt::format("{:7.2f}x", x);
    };
    std::printf(
        "%-9s %4d %10s %5.0f%% %5.0f%% %5.0f%% %5.0f%% %5.0f%% %s %s %7.0fus %7.0fus "
        "%7.0f %7.0f %7.0f %7.0f %7.0f %4.0f%% %6.0f %7.2fx %s",
        s["mode"].get<std::string>().c_str(), s["runs"].get<int>(),
        dp::format_bandwidth(v("goodput_bps")).c_str(), 100 * v("util_rail0_mean"),
        100 * v("util_rail0_peak"), 100 * v("util_rail1_mean"), 100 * v("util_rail1_peak"),
        100 * v("util_both_mean"), ms(v("step_p50_ms")).c_str(), ms(v("step_p99_ms")).c_str(),
        v("rpc_p50_us"), v("rpc_p99_us"), v("retrans_segs"), v("dsack_segs"), v("qdisc_drops"),
        v("reorder"), v("ofo_queue"), 100 * v("cpu_busy"), v("errors"), gr, ratio(pr).c_str());
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
      "cores busy;\n gput/1 and p99/1 against single; step times leave out the warm-up, the "
      "steps started\n before any had finished, on connections still in slow start: dp-load(1);"
      "\n goodput: the MoE steps' bytes, or without MoE (bulk) what param-sync's streams "
      "delivered)\n");
  std::string warm;
  for (auto& s : sums)
    if (s.contains("warmup_max_ms") && s["warmup_max_ms"].is_number() &&
        !std::isnan(s["warmup_max_ms"].get<double>()))
      warm += fmt::format("{}{} {:.1f} ms", warm.empty() ? "" : ", ", s["mode"].get<std::string>(),
                          s["warmup_max_ms"].get<double>());
  if (!warm.empty()) std::printf("warm-up, the slowest of its steps: %s\n", warm.c_str());
}

// The classes judged against their decisions: those that sent at least 5%
// of the bytes every node sent over the links (a class with little traffic
// need not hit its share), each by the median over rounds of a round's
// difference between carried and decided.
namespace {
constexpr double kJudgedShare = 0.05;

double links_total(const json& sh) {
  double t = 0;
  for (auto& [key, v] : sh.items())
    if (key.find("/(links)") != std::string::npos && v["bytes"].is_number())
      t += v["bytes"].get<double>();
  return t;
}

bool judged(const json& v, double total) {
  return v.contains("off_pp") && v["bytes"].is_number() &&
         v["bytes"].get<double>() >= kJudgedShare * total;
}

std::string rails_pct(const json& shares) {
  if (!shares.is_object() || shares.empty()) return "-";
  std::string out;
  for (auto& [rail, v] : shares.items())
    out += fmt::format("{}{:.1f}", out.empty() ? "" : " / ", v.is_number() ? v.get<double>() : NAN);
  return out;
}
}  // namespace

void print_shares(const std::vector<json>& sums) {
  std::printf(
      "\nwhere the bytes went, rail0 / rail1 (%% of what the node sent; medians over rounds):\n"
      "  %-9s %-16s %-4s %9s %15s %15s %8s\n",
      "mode", "class", "node", "MB", "carried", "decided", "off by");
  for (auto& s : sums) {
    if (!s.contains("shares") || !s["shares"].is_object()) continue;
    const double total = links_total(s["shares"]);
    // the links first (every mode has them), then the classes
    for (int pass = 0; pass < 2; ++pass)
      for (auto& [key, v] : s["shares"].items()) {
        const bool links = key.find("/(links)") != std::string::npos;
        if (links != (pass == 0)) continue;
        const auto slash = key.find('/');
        std::string off = "-";
        if (v.contains("off_pp") && v["off_pp"].is_number())
          off = fmt::format("{:.1f} pp{}", v["off_pp"].get<double>(), judged(v, total) ? "" : "*");
        std::printf("  %-9s %-16s %-4s %9.1f %15s %15s %8s\n", s["mode"].get<std::string>().c_str(),
                    key.substr(slash + 1).c_str(), key.substr(0, slash).c_str(),
                    v["bytes"].get<double>() / 1e6, rails_pct(v["carried"]).c_str(),
                    rails_pct(v.value("decided", json(nullptr))).c_str(), off.c_str());
      }
  }
  std::printf(
      "(carried: (links) from the rails' link counters, every class and the ACKs of the other\n"
      " node's data; a class from its per-rail transmit counters (dpctl class list:\n"
      " tx_bytes_by_path), on the node that sent its data. decided: the class's shares in\n"
      " dpctl class list every 200 ms, time-weighted over the run. off by: the largest\n"
      " difference over the rails, the median of the rounds'; *: under 5%% of the bytes, not\n"
      " judged)\n");
}

// The benchmark goals for dualpath against the other modes of the same run;
// each line says what was measured and whether the goal was met.
json print_goals(const std::vector<json>& sums, const Opts& o, const std::string& mine,
                 const Workload& w) {
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
  auto bw = [](double b) { return dp::format_bandwidth(b); };
  // every class that carries much within 5 points of its decision
  auto share_goal = [&] {
    double worst = NAN;
    std::string which = "no class judged";
    if (m[mine]->contains("shares")) {
      const json& sh = (*m[mine])["shares"];
      const double total = links_total(sh);
      for (auto& [key, val] : sh.items())
        if (judged(val, total) && val["off_pp"].is_number() &&
            !(val["off_pp"].get<double>() <= worst)) {
          worst = val["off_pp"].get<double>();
          which = fmt::format("{} {:.1f} pp: carried {}, decided {}", key, worst,
                              rails_pct(val["carried"]), rails_pct(val["decided"]));
        }
    }
    line("carried share within 5 pp of decided, each class", worst, 5, false, which);
  };
  if (w.streams > 0) {
    std::printf("\ngoals (%s, param-sync in %d stream%s):\n", mine.c_str(), w.streams,
                w.streams == 1 ? "" : "s");
    const double cap = o.cap0 + o.cap1;
    line("goodput >= 0.9x both rails' capacity", dp_g / cap, 0.9, true,
         fmt::format("{} of {} ({:.0f}%)", bw(dp_g), bw(cap), 100 * dp_g / cap));
    share_goal();
    double rpc = v(mine, "rpc_p99_us"), rpc_s = v("static", "rpc_p99_us");
    line("control RPC p99 <= static's", rpc, rpc_s, false,
         fmt::format("{:.0f} us against {:.0f} us", rpc, rpc_s));
    return out;
  }
  // What the workload can use of both rails: what it carried on one rail
  // alone, scaled by the rails' combined capacity.
  const double usable = single_g * (o.cap0 + o.cap1) / o.cap0;
  const double best_peer = std::fmax(v("ecmp", "goodput_bps"), v("mptcp", "goodput_bps"));
  const double best_p99 = std::fmin(v("ecmp", "step_p99_ms"), v("mptcp", "step_p99_ms"));
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
  share_goal();
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
  const bool sep = o.lab.topology == "separate";
  const std::string ratio = dp::format_bandwidth(o.cap0) + ":" + dp::format_bandwidth(o.cap1);
  const std::map<std::string, std::string> how{
      {"single", sep ? "everything to b's rail0 address, over rail0; no dualpathd"
                     : "everything over rail0 (the service route), no dualpathd"},
      {"static", "dualpathd, scheduler mode static: each class on its policy rail" +
                     std::string(sep ? ",\n            placed when it connects (b's address on "
                                       "that rail)"
                                     : "")},
      {"ecmp", "a multipath route over both rails, weights in the rails' ratio (" + ratio +
                   "),\n            L4 hashing (fib_multipath_hash_policy=1), both nodes"},
      {"mptcp", std::string("the kernel's MPTCP (dp-load --mptcp): a subflow endpoint on a's rail1 "
                            "address,\n            a signal endpoint on b's, limits subflow 2 "
                            "add_addr_accepted 2") +
                    (sep ? ";\n            a joins b's announced rail1 address over rail1" : "")},
      {"dualpath", sep ? "dualpathd, adaptive, as the policy's defaults: connections placed "
                         "when\n            they connect, on the rail the class's decision "
                         "gives"
                       : "dualpathd, adaptive, as the policy's defaults: decisions on 100 ms "
                         "peaks,\n            a 1 s hold, split elastic classes placed a "
                         "whole burst at a time\n            where the daemon's plan finishes "
                         "the round soonest"},
      {"flowlets",
       "dualpathd, adaptive, the defaults before 2026-12: decisions on smoothed\n"
       "            rates, split classes by flowlets (500us gap)"},
      {"cells",
       "dualpathd, adaptive: decisions on 100 ms peaks,\n"
       "            a 1 s hold, split elastic classes by 16 KiB flowcells where they\n"
       "            finish first, a flow's cells kept in order (flowcell_order keep)"},
      {"cells-any", "the same, cells free to overtake their own flow (flowcell_order any)"},
      {"bursts",
       "dualpathd, adaptive, placement = \"bursts\" written out (dualpath's "
       "defaults)"},
      {"multipath",
       "dualpathd, adaptive, client and server in a multipath class (bench-mp,\n"
       "            dpctl run) that makes their sockets MPTCP, and every port class\n"
       "            multipath: each connection a subflow per rail, active where its\n"
       "            class's decision gives the rail a share, else backup; the classes' QoS"},
  };
  std::printf("\nhow each mode is set up (tools/dp-lab mode; %s topology):\n",
              o.lab.topology.c_str());
  for (auto& m : o.modes) {
    auto it = how.find(m);
    std::printf("  %-9s %s\n", m.c_str(), it == how.end() ? "?" : it->second.c_str());
  }
  std::printf(
      "  the modes with dualpathd run the lab policies with expert-dispatch elastic and the\n"
      "  paths' capacities at the rails' rates (dp-lab bench_policies)\n");
  if (!o.congestion_control.empty())
    std::printf("  TCP congestion control: %s (--congestion-control, on every workload socket)\n",
                o.congestion_control.c_str());
  else
    std::printf("  TCP congestion control: %s (the machine's default, which the namespaces take)\n",
                o.lab.congestion_control.empty() ? "?" : o.lab.congestion_control.c_str());
  if (!o.lab.ack_priority.empty())
    std::printf(
        "  pure ACKs: skb_priority %s, the rails' HTB leaf served first ([qos] of the lab\n"
        "  policies), in every mode with dualpathd\n",
        o.lab.ack_priority.c_str());
  else
    std::printf("  pure ACKs: stamped as their class's data (the lab policies have no [qos])\n");
  if (sep)
    std::printf(
        "  not run in the separate topology: ecmp (no route reaches b's rail0 address over\n"
        "  rail1), flowlets, cells and bursts (they split a connection's packets over the\n"
        "  rails, and a connection lives on its rail's addresses here)\n");
}

}  // namespace bench

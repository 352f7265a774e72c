// SPDX-License-Identifier: Apache-2.0
// Daemon: the work of each tick, from the datapath's counters to the plan
// carried out: interfaces and routing kept in step, multipath subflows,
// burst placement, reserves, and the decisions, routing and connection
// resets that the controller's plans ask for.
#include "daemon.h"

#include <systemd/sd-daemon.h>

#include <algorithm>
#include <map>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "dualpath/core/units.h"
#include "dualpath/kernel/routing.h"
#include "dualpath/kernel/sock_diag.h"

namespace dp {

namespace {

// The classes that get burst plans, and the rails each may use: only a
// class the cell settings place that is split (a class whole on one rail
// has nowhere else to go), on the rails its written decision opens and
// whose interface is present.
struct BurstClasses {
  std::vector<std::vector<bool>> allowed;  // per class, per path
  std::vector<bool> planned;               // per class
};

BurstClasses burst_classes(const Plan::Cells& cells, const Controller& controller,
                           const Datapath& datapath, size_t C, size_t P) {
  BurstClasses out{std::vector<std::vector<bool>>(C, std::vector<bool>(P, false)),
                   std::vector<bool>(C, false)};
  for (size_t c = 0; c < C && c < cells.classes.size(); ++c) {
    const Shares& w = controller.written_shares(c);
    size_t open = 0;
    for (size_t p = 0; p < P && p < w.size(); ++p) open += w[p] > 0;
    if (!cells.classes[c] || open < 2) continue;
    out.planned[c] = true;
    for (size_t p = 0; p < P && p < w.size(); ++p)
      out.allowed[c][p] = w[p] > 0 && datapath.present(p);
  }
  return out;
}

// The planned flows sorted into streams and bursts, each with its index in
// the flows read.
struct PlannedFlowKinds {
  std::vector<BurstFlow> bursts;
  std::vector<StreamFlow> streams;
  std::vector<size_t> burst_of, stream_of;
};

// A flow is a stream once Streams says so (only when streams may move);
// every other flow is placed by its burst, sized by what BurstSizes expects
// of it. Both forget the flows that went idle.
PlannedFlowKinds sort_planned_flows(const std::vector<PlannedFlow>& flows, bool streams_move,
                                    Streams& streams, BurstSizes& burst_sizes,
                                    BurstSizes::Clock::time_point now) {
  PlannedFlowKinds out;
  for (size_t i = 0; i < flows.size(); ++i) {
    const PlannedFlow& f = flows[i];
    auto s =
        streams_move ? streams.observe(f.key, f.bursts, f.bytes, f.flags, now) : Streams::Sample{};
    if (s.stream) {
      out.streams.push_back({f.key, f.flow.klass, f.flow.path, s.bps});
      out.stream_of.push_back(i);
      continue;
    }
    out.bursts.push_back(f.flow);
    out.bursts.back().burst = burst_sizes.expect(f.key, f.flow.burst, now);
    out.burst_of.push_back(i);
  }
  burst_sizes.forget_idle(now);
  streams.forget_idle(now);
  return out;
}

// A class whose streams carry shares other than its decision says so in
// dpctl events: a stream moves whole, so a few streams cannot match any
// split.
void record_stream_shortfalls(const Policy& policy, const StreamPlan& by_count,
                              const std::vector<std::vector<uint16_t>>& decided, EventLog& events) {
  for (const auto& s : by_count.shortfalls) {
    SchedulerEvent e;
    e.t = SchedClock::now();
    e.klass = policy.classes[s.klass].name;
    e.kind = "streams";
    e.before = decided[s.klass];
    e.after = s.carried;
    e.reason = fmt::format(
        "{}: {} stream{} carr{} {} of the decided {}: a stream moves whole (it has no gap to be "
        "placed at, and its class does not allow reordering)",
        e.klass, s.streams, s.streams == 1 ? "" : "s", s.streams == 1 ? "ies" : "y",
        format_shares(policy, s.carried), format_shares(policy, decided[s.klass]));
    spdlog::info("{}", e.reason);
    events.record(std::move(e));
  }
}

}  // namespace

// A rail whose interface was deleted (or replaced by one with another ifindex)
// must stop being a redirect target at once: the kernel drops a packet
// redirected to an ifindex that no longer exists. Once an interface of that
// name is there again (a driver reloaded, a NIC reset, a bond or VF made
// anew), the running policy is applied again, which attaches to it, binds
// its BFD session to it and reads its carrier; tried once a second until it
// takes.
void Daemon::check_interfaces() {
  std::vector<size_t> back;
  for (size_t i = 0; i < policy_.paths.size(); ++i) {
    if (datapath_->check_present(i, policy_.paths[i])) controller_.vanished(i);
    if (!datapath_->present(i) && datapath_->ifindex_of(policy_.paths[i].interface) != 0)
      back.push_back(i);
  }
  auto now = std::chrono::steady_clock::now();
  if (back.empty() || now - reattach_tried_ < std::chrono::seconds(1)) return;
  reattach_tried_ = now;
  const Policy running = policy_;
  auto r = apply_policy(running);
  if (r) {
    spdlog::info("policy {} applied again: every rail's interface is attached", running.hash);
    reattach_error_.clear();
    // the new interface's link events came under an ifindex the daemon did
    // not watch yet: its carrier as it is now
    for (size_t i : back)
      controller_.carrier(i, PathMonitor::carrier_of(running.paths[i].interface),
                          SchedClock::now());
  } else if (r.error().what() != reattach_error_) {
    reattach_error_ = r.error().what();
    spdlog::warn("a rail's interface is back, but applying the policy again failed: {}; tried "
                 "again every second",
                 reattach_error_);
  }
}

// The kernel flushes a link's routes when it is set down, and someone may
// delete ours: once a second, and at once when a rail's carrier came back or
// link events were lost (ENOBUFS: a churn's events), what policy routing
// should hold is compared with what the kernel has and the missing rules and
// routes are added again. Without it, a rail that comes back after its link
// was down carries nothing until the next reload (the decisions move to it,
// the packets find no route).
void Daemon::resync_routing(std::chrono::steady_clock::time_point now) {
  std::vector<bool> carrier;
  for (size_t i = 0; i < policy_.paths.size(); ++i)
    carrier.push_back(controller_.health(i).carrier_up());
  // link events lost: a rule or route may have gone with them, checked now
  bool overflowed = monitor_.overflows() != routing_overflows_;
  if (carrier == routing_carrier_ && !overflowed &&
      now - routing_checked_ < std::chrono::seconds(1))
    return;
  routing_overflows_ = monitor_.overflows();
  routing_carrier_ = carrier;
  routing_checked_ = now;
  auto around = controller_.routed_around_for(policy_);
  auto missing = Routing::missing(policy_, around);
  if (!missing || missing->empty()) return;
  auto r = Routing::apply(policy_, around);
  if (!r) {
    spdlog::error("restoring policy routing failed: {}", r.error().what());
    return;
  }
  if (r->added > 0)
    spdlog::info(
        "policy routing: {} of its rules and routes missing (a link set down flushes "
        "its routes; or removed by hand): {} added",
        missing->size(), r->added);
  note_refused_routes(r->refused);
}

void Daemon::note_refused_routes(const std::vector<std::string>& refused) {
  if (refused == routes_refused_) return;
  for (const auto& why : refused)
    if (std::find(routes_refused_.begin(), routes_refused_.end(), why) == routes_refused_.end())
      spdlog::warn(
          "policy routing: {}; the other rules and routes are in place, and this one "
          "is tried again every second",
          why);
  if (refused.empty())
    spdlog::info("policy routing: every route the kernel refused is in place now");
  routes_refused_ = refused;
}

// The policy's multipath classes, and why they keep one subflow (a setting
// that could not be made) for readiness. A retry is quiet until it succeeds.
void Daemon::apply_multipath(const Policy& p, std::chrono::steady_clock::time_point now,
                             bool retry) {
  state_.multipath_tried = now;
  auto r = multipath_.set_policy(p, *datapath_);
  std::string was = std::exchange(state_.multipath_error, std::string());
  if (r) {
    if (!was.empty())
      spdlog::info("multipath classes: their settings are made now; new connections get subflows");
  } else if (!p.has_multipath()) {
    spdlog::warn("no multipath class left, but restoring the MPTCP settings failed: {}",
                 r.error().what());
  } else {
    state_.multipath_error = r.error().what();
    if (!retry)
      spdlog::error("multipath classes: {}; their connections keep one subflow", r.error().what());
  }
}

// An operator may set the MPTCP sysctls on the node after the daemon could
// not: tried again every 5 s.
void Daemon::retry_multipath(std::chrono::steady_clock::time_point now) {
  if (!state_.multipath_error.empty() && now - state_.multipath_tried >= std::chrono::seconds(5))
    apply_multipath(policy_, now, true);
}

void Daemon::tick() {
  const auto began = std::chrono::steady_clock::now();
  check_interfaces();
  datapath_->note_servers();
  // the policy's cgroups once a second: a unit restarted has a new cgroup
  if (auto now = began; now - cgroups_checked_ >= std::chrono::seconds(1)) {
    datapath_->refresh_cgroups(policy_);
    cgroups_checked_ = now;
  }
  measurements_.collect(policy_, *datapath_, state_.ticks);
  adapt_flowlet_gap();
  auto in = measurements_.tick_input(policy_, *datapath_);
  add_nccl_bytes(in);
  note_class_tx(in.class_tx_bytes, began);
  carry_out(controller_.tick(in));
  note_carried(in, began);
  resync_routing(began);
  retry_multipath(began);
  place_bursts();
  keep_reserves(began);
  // the tick's own time, shown by the metrics it is about to publish
  state_.tick_times.record(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
  if (metrics_ && metrics_->wanted()) publish_metrics();  // a scrape waits for it
  ++state_.ticks;
  sd_notify(0, "WATCHDOG=1");
}

// [scheduler] placement = "bursts": where each active flow of a split elastic
// class sends its next burst (core/bursts.cpp), from the bursts the datapath
// measured, on the rails the class's decision opens, at the capacity the
// other traffic leaves them (the cell settings' ns_per_kib).
void Daemon::place_bursts() {
  const auto& cells = controller_.cells();
  if (!cells || !cells->bursts) {
    if (plans_written_) {  // placement changed by a reload: the plans go
      if (auto r = datapath_->write_plans({}, {}); !r)
        spdlog::warn("clearing the burst plans failed: {}", r.error().what());
      else
        plans_written_ = false;
    }
    return;
  }
  const size_t C = policy_.classes.size(), P = policy_.paths.size();
  const BurstClasses scope = burst_classes(*cells, controller_, *datapath_, C, P);
  std::vector<double> left(P, 0);
  for (size_t p = 0; p < P && p < cells->ns_per_kib.size(); ++p)
    if (cells->ns_per_kib[p]) left[p] = 8192e9 / cells->ns_per_kib[p];
  // flows that sent in the last two seconds: the bursts of a step recur
  // well within that; older plans go. A large table takes a few ticks to
  // read: the plans written stay until then.
  auto flows = datapath_->burst_flows(scope.planned, std::chrono::seconds(2));
  if (!flows) return;
  // streams (no gap comes to place them at) by count, the rest by bursts;
  // in the separate topology a connection stays where it was made, stream
  // or not (CarriedShares and class list show what that carries)
  const auto now = BurstSizes::Clock::now();
  const PlannedFlowKinds kinds =
      sort_planned_flows(*flows, policy_.topology == Topology::Shared, streams_, burst_sizes_, now);
  std::vector<int> priority;
  for (auto& c : policy_.classes) priority.push_back(c.priority);
  auto by_burst = plan_bursts(kinds.bursts, scope.allowed, priority, left);
  std::vector<std::vector<uint16_t>> decided(C);
  for (size_t c = 0; c < C; ++c) {
    if (!scope.planned[c]) continue;
    const Shares& w = controller_.written_shares(c);
    decided[c].assign(P, 0);
    for (size_t p = 0; p < P && p < w.size(); ++p) decided[c][p] = scope.allowed[c][p] ? w[p] : 0;
  }
  auto by_count = stream_planner_.plan(kinds.streams, decided, now);
  BurstPlan plan;
  plan.path.assign(flows->size(), BurstPlan::kNone);
  plan.stream.assign(flows->size(), false);
  for (size_t i = 0; i < kinds.burst_of.size(); ++i)
    plan.path[kinds.burst_of[i]] = by_burst.path[i];
  for (size_t i = 0; i < kinds.stream_of.size(); ++i) {
    plan.path[kinds.stream_of[i]] = by_count.path[i];
    plan.stream[kinds.stream_of[i]] = true;
  }
  record_stream_shortfalls(policy_, by_count, decided, events_);
  if (auto r = datapath_->write_plans(*flows, plan); !r)
    spdlog::warn("writing the burst plans failed: {}", r.error().what());
  plans_written_ = true;
}

// A multipath class whose subflows are active on rails its decision gives
// nothing (an elastic class keeps a wider rail): what they carry is split by
// MPTCP over them, so that split is what the class is held to, and the
// change is said once in dpctl events.
void Daemon::note_subflow_shares(size_t c, const std::vector<bool>& active) {
  Shares want;
  if (policy_.classes[c].multipath) {
    const Shares& decided = controller_.decided_shares(c);
    want = multipath::subflow_shares(policy_, active, decided);
    if (want == decided) want.clear();
  }
  Shares& had = subflow_shares_[c];
  bool moved = had.size() != want.size();
  for (size_t i = 0; !moved && i < want.size(); ++i)
    moved = std::abs(int{had[i]} - int{want[i]}) > DP_SHARE_SCALE / 20;
  if (moved && !want.empty()) {
    SchedulerEvent e;
    e.t = SchedClock::now();
    e.klass = policy_.classes[c].name;
    e.kind = "multipath";
    e.before = controller_.decided_shares(c);
    e.after = want;
    std::string extra;
    for (size_t i = 0; i < policy_.paths.size() && i < active.size(); ++i)
      if (active[i] && (i >= e.before.size() || e.before[i] == 0))
        extra += (extra.empty() ? "" : ", ") + policy_.paths[i].name;
    e.reason = fmt::format(
        "{}: its subflows stay active on {} as well (an elastic class keeps a rail of "
        "comparable or wider capacity), so MPTCP splits it by the active rails' capacity, "
        "{}, where the decision says {}",
        e.klass, extra, format_shares(policy_, want), format_shares(policy_, e.before));
    spdlog::info("{}", e.reason);
    events_.record(std::move(e));
  }
  if (moved || want.empty()) had = std::move(want);
}

// What the NCCL plugins sent in each class (nccl.report) is the class's
// load as much as what the datapath counted: the plugin marks its sockets
// with their path's fwmark, which the datapath leaves unclassified, so the
// two never count the same byte. Paced (NcclReports::paced()): a report
// every few ticks reads as a steady rate.
void Daemon::add_nccl_bytes(TickInput& in) {
  auto& nccl = state_.nccl;
  nccl.advance(std::chrono::steady_clock::now());
  if (nccl.totals().empty()) return;
  for (size_t c = 0; c < policy_.classes.size() && c < in.class_path_tx_bytes.size(); ++c) {
    auto& by_path = in.class_path_tx_bytes[c];
    for (size_t p = 0; p < policy_.paths.size() && p < by_path.size(); ++p) {
      uint64_t b = nccl.paced(policy_.classes[c].name, policy_.paths[p].name);
      by_path[p] += b;
      in.class_tx_bytes[c] += b;
    }
  }
}

Shares Daemon::decided_shares(size_t klass) const {
  if (klass < subflow_shares_.size() && !subflow_shares_[klass].empty())
    return subflow_shares_[klass];
  return controller_.decided_shares(klass);
}

// What each path carried of each class under the decision now written.
void Daemon::note_carried(const TickInput& in, std::chrono::steady_clock::time_point now) {
  std::vector<std::vector<uint16_t>> decided;
  for (size_t c = 0; c < policy_.classes.size(); ++c) decided.push_back(decided_shares(c));
  state_.carried.observe(decided, in.class_path_tx_bytes, now);
}

// When each class last sent at more than 1% of its smallest reserve: a
// reserve counts on a rail only while its class is carried (core/police.h),
// and the ACKs and keepalives of a class that sends nothing else do not
// keep it carried.
void Daemon::note_class_tx(const std::vector<uint64_t>& tx,
                           std::chrono::steady_clock::time_point now) {
  auto& seen = state_.class_tx_bytes;
  auto& at = state_.class_tx_at;
  if (seen.size() != tx.size() || tx.size() != policy_.classes.size()) {
    seen = tx;  // a new policy: nothing is known to be carried yet
    at.assign(tx.size(), std::chrono::steady_clock::time_point{});
    return;
  }
  const double tick_s = std::chrono::duration<double>(policy_.scheduler.tick).count();
  for (size_t c = 0; c < tx.size(); ++c) {
    uint64_t least = 0;
    for (const auto& ps : policy_.paths) {
      uint64_t r = policy_.classes[c].reserve_on(ps.capacity_bps);
      if (r && (!least || r < least)) least = r;
    }
    uint64_t sent = tx[c] - std::min(seen[c], tx[c]);
    seen[c] = tx[c];
    if (least && static_cast<double>(sent) * 8 > 0.01 * static_cast<double>(least) * tick_s)
      at[c] = now;
  }
}

// Reserves: each rail's policer follows the decisions and which reserved
// classes are carried (core/police.h); nothing when no class has one.
void Daemon::keep_reserves(std::chrono::steady_clock::time_point now) {
  const size_t C = policy_.classes.size(), P = policy_.paths.size();
  bool any = std::any_of(policy_.classes.begin(), policy_.classes.end(),
                         [](const ClassSpec& c) { return c.reserve_bps || c.reserve_share > 0; });
  std::vector<RailPolice> want(P);
  if (any) {
    std::vector<Shares> written;
    std::vector<bool> carried(C, false);
    for (size_t c = 0; c < C; ++c) {
      written.push_back(controller_.written_shares(c));
      carried[c] =
          c < state_.class_tx_at.size() && now - state_.class_tx_at[c] < std::chrono::seconds(1);
    }
    want = plan_police(policy_, written, carried);
  }
  if (want == state_.police) return;
  if (auto r = datapath_->write_police(want); !r) {
    spdlog::error("writing the reserves' policers failed: {}", r.error().what());
    return;  // tried again on the next tick
  }
  for (size_t i = 0; i < P; ++i) {
    uint64_t was = i < state_.police.size() ? state_.police[i].rate_bps : 0;
    if (want[i].rate_bps == was) continue;
    if (want[i].rate_bps)
      spdlog::info("path {}: classes without a reserve held to {} (reserves carried there: {})",
                   policy_.paths[i].name, format_bandwidth(static_cast<double>(want[i].rate_bps)),
                   format_bandwidth(static_cast<double>(want[i].reserved_bps)));
    else
      spdlog::info("path {}: no reserve carried, nothing policed", policy_.paths[i].name);
  }
  state_.police = std::move(want);
}

// PathMonitor whose delays differ need a longer flowlet gap, or a re-placed
// flowlet overtakes the one before it (dp-bench-reorder --background).
void Daemon::adapt_flowlet_gap() {
  const auto& k = policy_.scheduler;
  auto gap = static_cast<uint64_t>(
      (k.adaptive_flowlet_gap ? effective_flowlet_gap(k.flowlet_gap, measurements_.rtt_p50_us())
                              : k.flowlet_gap)
          .count());
  uint64_t cur = datapath_->flowlet_gap_ns();
  if (gap == cur || (gap > cur ? gap - cur : cur - gap) < cur / 10) return;  // within 10%
  if (!datapath_->set_flowlet_gap(gap)) return;
  spdlog::debug("flowlet gap {} -> {} (rails' median RTTs differ)", format_duration(Nanos(cur)),
                format_duration(Nanos(gap)));
}

void Daemon::carry_out(Plan plan) {
  for (auto& e : plan.events) events_.record(std::move(e));
  for (auto& w : plan.writes) {
    auto r = datapath_->write_decision(w.klass, w.shares, w.flags);
    if (!r) {
      spdlog::error("writing the decision of {} failed: {}", policy_.classes[w.klass].name,
                    r.error().what());
      continue;  // the next plan writes it again
    }
    if (w.event) {
      spdlog::info("{}", w.event->reason);
      events_.record(std::move(*w.event));
    }
    controller_.written(w);
  }
  if (plan.cells) {
    const auto& c = *plan.cells;
    if (auto r = datapath_->write_cells(c.shift, c.classes, c.ns_per_kib, c.any_order, c.bursts);
        !r)
      spdlog::error("writing the flowcell settings failed: {}", r.error().what());
  }
  if (plan.route_around) {
    const auto& failed = *plan.route_around;
    auto r = Routing::apply(policy_, failed);
    if (!r) {
      // tried again on the next change or tick
      spdlog::error("rewriting policy routing for failover failed: {}", r.error().what());
    } else {
      std::string around;
      for (size_t i = 0; i < failed.size(); ++i)
        if (failed[i]) around += (around.empty() ? "" : ", ") + policy_.paths[i].name;
      spdlog::info("policy routing {}: {} added, {} removed",
                   around.empty() ? "restored" : "around " + around, r->added, r->removed);
      note_refused_routes(r->refused);
      controller_.routed(failed);
    }
  }
  for (const auto& r : plan.resets) reset_connections(r.path, r.latency_sensitive_only, r.suspect);
  // packets caught waiting for address resolution on a rail routed around
  // (Routing::drop_unresolved_neighbours): on every plan, as one may have
  // been queued just after the last sweep
  auto around = controller_.routed_around_for(policy_);
  for (size_t i = 0; i < around.size(); ++i) {
    if (!around[i]) continue;
    auto n = Routing::drop_unresolved_neighbours(policy_.paths[i].interface);
    if (!n)
      spdlog::warn("path {}: {}", policy_.paths[i].name, n.error().what());
    else if (*n > 0)
      // the failed rail's own traffic (BFD) makes new ones: said once
      spdlog::log(neighbours_said_ ? spdlog::level::debug : spdlog::level::info,
                  "path {}: {} unresolved neighbour entr{} deleted (packets waiting there are "
                  "sent again by TCP on the new path)",
                  policy_.paths[i].name, *n, *n == 1 ? "y" : "ies");
    neighbours_said_ = neighbours_said_ || (n && *n > 0);
  }
  if (std::find(around.begin(), around.end(), true) == around.end()) neighbours_said_ = false;
  steer_multipath();
  // what the next daemon starts from, should this one be killed
  auto records = controller_.records();
  if (records != health_written_) {
    if (auto r = datapath_->write_health(records); !r)
      spdlog::warn("keeping the rails' health for a restart failed: {}", r.error().what());
    else
      health_written_ = std::move(records);
  }
}

// Multipath connections follow health and decisions on every plan: a
// failed rail's subflows go, a rail back from its hold-down gets them
// again, roles follow the shares.
void Daemon::steer_multipath() {
  if (!multipath_.running()) return;
  multipath::Want w;
  // a suspect rail's subflows go at once: MPTCP re-sends what they hold on
  // the others now, not after the subflow goes stale (two RTOs, longer on a
  // full rail); they are made again if BFD does not confirm the suspicion
  for (size_t i = 0; i < policy_.paths.size(); ++i) {
    const PathHealth& h = controller_.health(i);
    w.usable.push_back(h.weight() > 0 && h.latency_ok() && datapath_->present(i));
  }
  if (auto r = datapath_->set_rails_up(w.usable); !r)
    spdlog::warn("marking the rails' health for multipath answers failed: {}", r.error().what());
  subflow_shares_.resize(policy_.classes.size());
  for (size_t c = 0; c < policy_.classes.size(); ++c) {
    w.active.push_back(multipath::active_rails(policy_, c, controller_.written_shares(c), w.usable,
                                               controller_.operator_pinned(c)));
    note_subflow_shares(c, w.active.back());
  }
  multipath_.reconcile(w);
  for (auto& e : multipath_.take_events()) {
    spdlog::info("{}", e.reason);
    events_.record(std::move(e));
  }
}

// The separate topology: a failed rail's classified TCP connections cannot
// move, so they are ended; applications reconnect at once, and connect-time
// placement puts the new connections where the decisions say.
void Daemon::reset_connections(size_t path, bool latency_sensitive_only, bool suspect) {
  const auto& ps = policy_.paths[path];
  std::vector<IpAddr> locals;
  for (const auto& a : {ps.source, ps.source6})
    if (a) locals.push_back(*a);
  if (locals.empty()) {
    spdlog::warn("path {} failed: its connections are not ended (the path has no source address)",
                 ps.name);
    return;
  }
  std::map<std::string, size_t> by_class;
  auto ended = destroy_tcp(locals, [&](const TcpSocketInfo& s) {
    // a multipath connection loses only the failed rail's subflow
    if (multipath_.is_subflow(s.src, s.sport)) return false;
    int c = policy_.classify(Proto::Tcp, s.sport, s.dport, s.mark);
    if (c < 0) return false;  // not ours to end
    if (latency_sensitive_only &&
        policy_.classes[static_cast<size_t>(c)].kind != ClassKind::LatencySensitive)
      return false;
    ++by_class[policy_.classes[static_cast<size_t>(c)].name];
    return true;
  });
  if (!ended) {
    spdlog::error("path {} failed: ending its connections failed: {}", ps.name,
                  ended.error().what());
    return;
  }
  if (ended->empty()) return;
  std::string what;
  for (auto& [cls, n] : by_class) what += fmt::format("{}{} {}", what.empty() ? "" : ", ", n, cls);
  SchedulerEvent e;
  e.t = SchedClock::now();
  e.path = ps.name;
  e.kind = "health";
  e.reason = fmt::format(
      "{} {}: ended {} connection{} on it ({}) so that they reconnect on a "
      "rail that works",
      ps.name, suspect ? "is suspect" : "failed", ended->size(), ended->size() == 1 ? "" : "s",
      what);
  spdlog::warn("{}", e.reason);
  events_.record(std::move(e));
  state_.connections_reset += ended->size();
}

}  // namespace dp

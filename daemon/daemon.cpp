// SPDX-License-Identifier: Apache-2.0
#include "daemon.h"

#include <signal.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "dualpath/core/encode.h"
#include "dualpath/core/metrics.h"
#include "dualpath/core/policy_diff.h"
#include "dualpath/core/units.h"
#include "dualpath/kernel/node_checks.h"
#include "dualpath/kernel/procfs.h"
#include "dualpath/kernel/routing.h"
#include "dualpath/kernel/sock_diag.h"
#include "dualpath/version.h"
#include "metrics_view.h"

namespace dp {

namespace {

constexpr std::initializer_list<int> kSignals = {SIGTERM, SIGINT, SIGHUP};

// How long a scrape waits for the daemon's next tick to publish: two ticks,
// within [100 ms, 5 s].
Nanos fresh_wait(Nanos tick) {
  return std::clamp<Nanos>(2 * tick, std::chrono::milliseconds(100), std::chrono::seconds(5));
}

// Class port ranges inside the kernel's ephemeral range would classify any
// connection that happens to draw such a source port. Warn unless reserved.
void warn_ephemeral_overlap(const Policy& p) {
  for (auto& w : ephemeral_port_warnings(p, read_ephemeral_ports())) spdlog::warn("{}", w);
}

}  // namespace

Daemon::Daemon(DaemonOptions opts)
    : opts_(std::move(opts)), monitor_(loop_, controller_, [this] { settle(); }) {}

Daemon::~Daemon() = default;

Result<void> Daemon::cleanup(const Policy& p, const std::string& bpffs_root) {
  DP_TRY(Datapath::cleanup(p, bpffs_root));
  return Multipath::restore_settings(p.node);
}

// ---------------------------------------------------------------- start / apply

Result<void> Daemon::start() {
  // Before any thread exists (the metrics HTTP server's).
  EventLoop::block_signals(kSignals);
  state_.started = std::chrono::steady_clock::now();
  auto load = load_policy_file(opts_.policy_file);
  if (!load.ok()) {
    for (auto& e : load.errors) spdlog::error("{}", e.str());
    return DP_ERROR("policy {} is invalid ({} error{})", opts_.policy_file, load.errors.size(),
                    load.errors.size() == 1 ? "" : "s");
  }
  const Policy& p = *load.policy;
  // Claim the control socket before touching the kernel: a second daemon for
  // the same node stops here instead of re-programming a running datapath.
  auto control = ControlServer::listen(opts_.socket_path, opts_.socket_group);
  if (!control) return control.error();
  control_ = std::move(*control);
  auto dp = Datapath::open(Datapath::pin_dir(opts_.bpffs_root, p.node));
  if (!dp) return dp.error();
  datapath_ = std::move(*dp);
  DP_TRY(start_metrics(p.metrics.listen));
  DP_TRY(apply_policy(p));
  for (auto& c : all_commands(*this)) commands_.add(std::move(c));
  spdlog::info("node {}: policy {} (hash {}) applied: {} paths, {} classes, generation {}", p.node,
               p.file, p.hash, p.paths.size(), p.classes.size(), datapath_->generation());
  return {};
}

Result<void> Daemon::apply_policy(const Policy& next) {
  // 1. Everything that can fail without touching the kernel, and the
  //    inactive generation's classification tables: invisible to packets.
  auto staged = datapath_->stage(next, have_policy_ || datapath_->adopted());
  if (!staged) return staged.error();

  // 2. Policy routing, then the tc programs; undo routing if either fails.
  //    A path that is routed around now stays so under the new policy.
  std::vector<bool> around = controller_.routed_around_for(next);
  auto routed = Routing::apply(next, around);
  auto undo_routing = [&] {  // back to the running policy's routing, or none
    if (have_policy_)
      (void)Routing::apply(policy_, controller_.routed_around_for(policy_));
    else
      (void)Routing::remove(next);
  };
  if (!routed) {
    undo_routing();
    return routed.error();
  }
  spdlog::info("policy routing: {} added, {} removed, {} unchanged", routed->added, routed->removed,
               routed->unchanged);
  if (auto a = datapath_->attach(next, *staged); !a) {
    undo_routing();
    return a.error();
  }

  // 3. PathMonitor, names and decisions, then the flip that makes it all live.
  auto pins = datapath_->commit(next, *staged);
  if (!pins) return pins.error();

  // 4. The daemon's side: measurement, the controller, the rails' health.
  measurements_.reset(next);
  std::vector<bool> carrier;
  for (auto& ps : next.paths) carrier.push_back(PathMonitor::carrier_of(ps.interface));
  std::vector<Controller::Pin> cpins;
  for (auto& pin : *pins) cpins.push_back({pin.klass, pin.path});
  controller_.set_policy(next, carrier, around, cpins, SchedClock::now());
  if (!have_policy_ && datapath_->adopted())
    // a restart: each rail starts from what the daemon before this one knew
    controller_.inherit(datapath_->health_records(next.classes.size()), SchedClock::now());
  health_written_.clear();
  subflow_shares_.clear();  // classes may have moved: steer_multipath says them again
  policy_ = next;
  have_policy_ = true;
  monitor_.setup(next, datapath_->rail_ifindexes());
  apply_multipath(next, std::chrono::steady_clock::now(), false);
  settle();
  warn_ephemeral_overlap(next);
  state_.checks = check_node(next);
  spdlog::info("topology {}: {}", to_string(next.topology),
               next.topology == Topology::Separate
                   ? "each rail is its own network; connections are placed when they are made"
                   : "both rails reach the peers' addresses; flows may move between rails");
  for (const auto& c : state_.checks) {
    if (c.ok)
      spdlog::info("path {}: {} ok: {}", c.path, c.what, c.detail);
    else
      spdlog::warn("path {}: {}: {}", c.path, c.what, c.detail);
  }
  restart_responder(next);
  return {};
}

// The responder restarts only when what it listens on or answers changed,
// so that a reload does not cut a peer's validation short. It never refuses
// a policy: a rail without its address yet is what node checks report.
void Daemon::restart_responder(const Policy& next) {
  json key = {next.responder.enable,
              next.responder.port,
              next.responder.max_sessions,
              next.responder.max_duration.count(),
              next.node,
              to_string(next.topology),
              responder_ports(next)};  // its MPTCP listeners come and go with multipath classes
  for (const auto& pf : next.responder_allowed()) key.push_back(pf.str());
  for (const auto& ps : next.paths)
    key.push_back({ps.name, ps.interface, ps.fwmark, ps.source ? ps.source->str() : "",
                   ps.source6 ? ps.source6->str() : ""});
  if (key == responder_key_) return;
  responder_key_ = key;
  if (auto r = responder_.start(next); !r) spdlog::warn("{}", r.error().what());
}

Result<void> Daemon::reload() {
  std::string before = policy_.hash;
  auto r = reload_policy();
  state_.last_reload_ok = r.ok();
  ++(r ? state_.reloads_applied : state_.reloads_refused);
  // in dpctl events beside the decisions it may cause
  SchedulerEvent e;
  e.t = SchedClock::now();
  e.kind = "policy";
  e.reason = r ? fmt::format("policy {} -> {} ({})", before, policy_.hash, *r) : r.error().what();
  events_.record(std::move(e));
  publish_metrics();  // a refusal shows at once, not a tick later
  if (!r) return r.error();
  return {};
}

// Returns what the reload changed, in one line.
Result<std::string> Daemon::reload_policy() {
  auto load = load_policy_file(opts_.policy_file);
  if (!load.ok()) {
    for (auto& e : load.errors) spdlog::error("{}", e.str());
    return DP_ERROR("policy {} refused ({} error{}); the running policy {} stays",
                    opts_.policy_file, load.errors.size(), load.errors.size() == 1 ? "" : "s",
                    policy_.hash);
  }
  if (load.policy->node != policy_.node)
    return DP_ERROR("policy {} names node \"{}\" but this daemon runs node \"{}\"; refused",
                    opts_.policy_file, load.policy->node, policy_.node);
  if (load.policy->metrics.listen != metrics_listen_) {
    auto m = start_metrics(load.policy->metrics.listen);
    if (!m)
      return DP_ERROR("policy {} refused: {}; the running policy {} stays", opts_.policy_file,
                      m.error().what(), policy_.hash);
  }
  Policy old = policy_;
  auto r = apply_policy(*load.policy);
  if (!r)
    return DP_ERROR("applying policy {} failed: {}; the running policy {} stays", opts_.policy_file,
                    r.error().what(), old.hash);
  // the journal says what each reload changed, as dpctl policy diff would
  auto changes = diff_policies(old.text, "running", policy_.text, policy_.file);
  size_t n = changes ? changes->size() : 0;
  spdlog::info("policy reloaded: {} -> {}{}", old.hash, policy_.hash,
               !changes ? ""
               : n      ? fmt::format(", {} change{}:", n, n == 1 ? "" : "s")
                        : " (comments and layout only)");
  constexpr size_t kLogged = 20;
  for (size_t i = 0; changes && i < n && i < kLogged; ++i)
    spdlog::info("  {}", (*changes)[i].str());
  if (n > kLogged) spdlog::info("  ... and {} more (dpctl policy diff)", n - kLogged);
  arm_tick();
  if (!changes) return std::string("changes unknown");
  if (n == 0) return std::string("comments and layout only");
  if (n == 1) return (*changes)[0].str();
  return fmt::format("{} changes; first {}", n, (*changes)[0].str());
}

// At start, and after a reload that changed the policy's tick.
void Daemon::arm_tick() {
  if (!tick_timer_ || policy_.scheduler.tick == armed_tick_) return;
  if (auto r = loop_.set_interval(*tick_timer_, policy_.scheduler.tick); !r) {
    spdlog::error("setting the tick to {} failed: {}", format_duration(policy_.scheduler.tick),
                  r.error().what());
    return;
  }
  if (armed_tick_.count())
    spdlog::info("tick {} -> {}", format_duration(armed_tick_),
                 format_duration(policy_.scheduler.tick));
  armed_tick_ = policy_.scheduler.tick;
  if (metrics_) metrics_->set_fresh_wait(fresh_wait(armed_tick_));
}

// ---------------------------------------------------------------- tick

// A rail whose interface was deleted (or replaced by one with another ifindex)
// must stop being a redirect target at once: the kernel drops a packet
// redirected to an ifindex that no longer exists. A reload re-attaches.
void Daemon::check_interfaces() {
  for (size_t i = 0; i < policy_.paths.size(); ++i)
    if (datapath_->check_present(i, policy_.paths[i])) controller_.vanished(i);
}

// The kernel flushes a link's routes when it is set down, and someone may
// delete ours: once a second, and at once when a rail's carrier came back,
// what policy routing should hold is compared with what the kernel has and
// the missing rules and routes are added again. Without it, a rail that
// comes back after its link was down carries nothing until the next reload
// (the decisions move to it, the packets find no route).
void Daemon::resync_routing(std::chrono::steady_clock::time_point now) {
  std::vector<bool> carrier;
  for (size_t i = 0; i < policy_.paths.size(); ++i)
    carrier.push_back(controller_.health(i).carrier_up());
  if (carrier == routing_carrier_ && now - routing_checked_ < std::chrono::seconds(1)) return;
  routing_carrier_ = carrier;
  routing_checked_ = now;
  auto around = controller_.routed_around_for(policy_);
  auto missing = Routing::missing(policy_, around);
  if (!missing || missing->empty()) return;
  auto r = Routing::apply(policy_, around);
  if (!r)
    spdlog::error("restoring policy routing failed: {}", r.error().what());
  else if (r->added > 0)
    spdlog::info(
        "policy routing: {} of its rules and routes missing (a link set down flushes "
        "its routes; or removed by hand): {} added",
        missing->size(), r->added);
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
  datapath_->note_udp_servers();
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
  std::vector<std::vector<bool>> allowed(C, std::vector<bool>(P, false));
  std::vector<bool> planned(C, false);
  for (size_t c = 0; c < C && c < cells->classes.size(); ++c) {
    const Shares& w = controller_.written_shares(c);
    // only a split class: a class whole on one rail has nowhere else to go
    size_t open = 0;
    for (size_t p = 0; p < P && p < w.size(); ++p) open += w[p] > 0;
    if (!cells->classes[c] || open < 2) continue;
    planned[c] = true;
    for (size_t p = 0; p < P && p < w.size(); ++p)
      allowed[c][p] = w[p] > 0 && datapath_->present(p);
  }
  std::vector<double> left(P, 0);
  for (size_t p = 0; p < P && p < cells->ns_per_kib.size(); ++p)
    if (cells->ns_per_kib[p]) left[p] = 8192e9 / cells->ns_per_kib[p];
  // flows that sent in the last two seconds: the bursts of a step recur
  // well within that; older plans go. A large table takes a few ticks to
  // read: the plans written stay until then.
  auto flows = datapath_->burst_flows(planned, std::chrono::seconds(2));
  if (!flows) return;
  // streams (no gap comes to place them at) by count, the rest by bursts;
  // in the separate topology a connection stays where it was made, stream
  // or not (CarriedShares and class list show what that carries)
  const bool streams_move = policy_.topology == Topology::Shared;
  std::vector<BurstFlow> bursts;
  std::vector<StreamFlow> streams;
  std::vector<size_t> burst_of, stream_of;  // index in *flows
  const auto now = BurstSizes::Clock::now();
  for (size_t i = 0; i < flows->size(); ++i) {
    const PlannedFlow& f = (*flows)[i];
    auto s =
        streams_move ? streams_.observe(f.key, f.bursts, f.bytes, f.flags, now) : Streams::Sample{};
    if (s.stream) {
      streams.push_back({f.key, f.flow.klass, f.flow.path, s.bps});
      stream_of.push_back(i);
      continue;
    }
    bursts.push_back(f.flow);
    bursts.back().burst = burst_sizes_.expect(f.key, f.flow.burst, now);
    burst_of.push_back(i);
  }
  burst_sizes_.forget_idle(now);
  streams_.forget_idle(now);
  std::vector<int> priority;
  for (auto& c : policy_.classes) priority.push_back(c.priority);
  auto by_burst = plan_bursts(bursts, allowed, priority, left);
  std::vector<std::vector<uint16_t>> decided(C);
  for (size_t c = 0; c < C; ++c) {
    if (!planned[c]) continue;
    const Shares& w = controller_.written_shares(c);
    decided[c].assign(P, 0);
    for (size_t p = 0; p < P && p < w.size(); ++p) decided[c][p] = allowed[c][p] ? w[p] : 0;
  }
  auto by_count = stream_planner_.plan(streams, decided, now);
  BurstPlan plan;
  plan.path.assign(flows->size(), BurstPlan::kNone);
  plan.stream.assign(flows->size(), false);
  for (size_t i = 0; i < burst_of.size(); ++i) plan.path[burst_of[i]] = by_burst.path[i];
  for (size_t i = 0; i < stream_of.size(); ++i) {
    plan.path[stream_of[i]] = by_count.path[i];
    plan.stream[stream_of[i]] = true;
  }
  for (const auto& s : by_count.shortfalls) {
    SchedulerEvent e;
    e.t = SchedClock::now();
    e.klass = policy_.classes[s.klass].name;
    e.kind = "streams";
    e.before = decided[s.klass];
    e.after = s.carried;
    e.reason = fmt::format(
        "{}: {} stream{} carr{} {} of the decided {}: a stream moves whole (it has no gap to be "
        "placed at, and its class does not allow reordering)",
        e.klass, s.streams, s.streams == 1 ? "" : "s", s.streams == 1 ? "ies" : "y",
        format_shares(policy_, s.carried), format_shares(policy_, decided[s.klass]));
    spdlog::info("{}", e.reason);
    events_.record(std::move(e));
  }
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

// ---------------------------------------------------------------- metrics

Result<void> Daemon::start_metrics(const std::string& listen) {
  if (listen.empty()) {
    if (metrics_) spdlog::info("metrics endpoint stopped");
    metrics_.reset();
    metrics_listen_.clear();
    return {};
  }
  std::unique_ptr<MetricsExporter> old = std::move(metrics_);
  old.reset();  // free the port first when the address is the same
  auto e = MetricsExporter::start(listen);
  if (!e) return e.error();
  metrics_ = std::move(*e);
  metrics_listen_ = listen;
  metrics_->set_fresh_wait(fresh_wait(policy_.scheduler.tick));
  spdlog::info("metrics on http://{}/metrics", listen);
  return {};
}

void Daemon::publish_metrics() {
  if (metrics_) metrics_->publish(build_metrics(metrics_view(*this)));
}

// ---------------------------------------------------------------- loop

int Daemon::run() {
  EventLoop::block_signals(kSignals);
  ::signal(SIGPIPE, SIG_IGN);
  auto on_hup = [this](int) {
    sd_notify(0, "RELOADING=1");
    auto r = reload();
    if (!r) spdlog::error("{}", r.error().what());
    sd_notify(0, "READY=1");
  };
  auto on_exit = [this](int signo) {
    spdlog::info("signal {}: exiting; the datapath stays pinned and steering", strsignal(signo));
    loop_.stop();
  };
  if (auto r = loop_.on_signals({{SIGHUP, on_hup}, {SIGTERM, on_exit}, {SIGINT, on_exit}}); !r) {
    spdlog::error("{}", r.error().what());
    return 1;
  }
  auto timer = loop_.add_timer([this] { tick(); });
  if (!timer) {
    spdlog::error("{}", timer.error().what());
    return 1;
  }
  tick_timer_ = *timer;
  arm_tick();
  control_->serve(loop_, commands_);
  if (auto r = monitor_.open_link_events(); !r)
    spdlog::error("{}: carrier changes are seen only at the next tick", r.error().what());
  tick();
  sd_notify(0, "READY=1");
  spdlog::info("serving {} (tick {})", opts_.socket_path, format_duration(policy_.scheduler.tick));
  loop_.run();
  sd_notify(0, "STOPPING=1");
  monitor_.send_admin_down();  // RFC 5882 3.2: the peers do not take this for a failure
  control_->close();           // unlinks the socket if it is still ours
  return 0;
}

}  // namespace dp

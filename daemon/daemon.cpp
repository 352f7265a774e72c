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
  auto bfd_auth = PathMonitor::read_auth(next.health);
  if (!bfd_auth) return bfd_auth.error();
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
  note_refused_routes(routed->refused);
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
  events_.set_keep(static_cast<size_t>(next.events.keep));
  monitor_.setup(next, datapath_->rail_ifindexes(), *bfd_auth);
  // the servers no hook saw bind or listen (before the datapath was there,
  // or on an address that has just become a rail's), before the first tick
  datapath_->note_servers();
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

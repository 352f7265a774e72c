// SPDX-License-Identifier: Apache-2.0
// The control socket's commands: one table of (name, mutates, handler). A
// query gathers plain data from the components and renders it with
// core/views.h; a change goes through the Datapath (decisions) and the
// Controller (its state), then settles.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "daemon.h"
#include "dualpath/core/encode.h"
#include "dualpath/core/launch_env.h"
#include "dualpath/core/views.h"
#include "dualpath/kernel/routing.h"
#include "dualpath/version.h"

namespace dp {

void Daemon::add_commands() {
  auto ok = [](auto fn) { return [fn](const json&) { return reply_ok(fn()); }; };
  // queries: anyone who can connect
  commands_.add({"status", false, ok([this] { return status_json(); })});
  commands_.add({"path.list", false, ok([this] { return paths_json(); })});
  commands_.add({"path.show", false, [this](const json& args) {
                   auto name = string_arg(args, "path");
                   if (!name) return reply_error("bad_request", "path.show needs \"path\"");
                   for (auto& p : paths_json())
                     if (p["name"] == *name) return reply_ok(p);
                   return reply_error("not_found", fmt::format("no path named \"{}\"", *name));
                 }});
  commands_.add({"class.list", false, ok([this] { return classes_json(); })});
  commands_.add({"node.check", false, ok([this] { return node_check_json(); })});
  commands_.add({"class.env", false, [this](const json& args) { return class_env(args); }});
  commands_.add({"flow.list", false, [this](const json& args) { return flows_json(args); }});
  commands_.add({"policy.show", false, ok([this] {
                   std::error_code ec;
                   std::string file = std::filesystem::absolute(policy_.file, ec).string();
                   return json{{"file", ec ? policy_.file : file},
                               {"hash", policy_.hash},
                               {"node", policy_.node},
                               {"text", policy_.text},
                               {"disk_hash", policy_disk_hash()}};
                 })});
  commands_.add({"events", false, [this](const json& args) {
                   uint64_t since = 0;
                   if (args.contains("since")) {
                     if (!args["since"].is_number_unsigned())
                       return reply_error("bad_request", "\"since\" must be an event number");
                     since = args["since"].get<uint64_t>();
                   }
                   return reply_ok(events_.render(policy_, since));
                 }});
  // changes: root only
  commands_.add({"path.drain", true, [this](const json& args) { return drain(args, true); }});
  commands_.add({"path.undrain", true, [this](const json& args) { return drain(args, false); }});
  commands_.add({"class.set", true, [this](const json& args) { return class_set(args); }});
  commands_.add({"class.unpin", true, [this](const json& args) { return class_unpin(args); }});
  commands_.add({"class.run", true, [this](const json& args) { return class_run(args); }});
  commands_.add({"policy.reload", true, [this](const json&) {
                   auto r = reload();
                   if (!r) return reply_error("invalid", r.error().what());
                   return reply_ok({{"hash", policy_.hash}});
                 }});
}

// ---------------------------------------------------------------- queries

// dpctl validate's local half: the node's rails against the policy, now.
json Daemon::node_check_json() const {
  json checks = json::array();
  auto add = [&](const std::string& path, const std::string& what, bool good, std::string detail) {
    checks.push_back(
        {{"path", path}, {"check", what}, {"ok", good}, {"detail", std::move(detail)}});
  };
  json mtus = json::object();
  auto missing = Routing::missing(policy_, controller_.routed_around_for(policy_));
  for (size_t i = 0; i < policy_.paths.size(); ++i) {
    const auto& ps = policy_.paths[i];
    int mtu = interface_mtu(ps.interface);
    mtus[ps.name] = mtu;
    bool carrier = Rails::carrier_of(ps.interface);
    add(ps.name, "link", carrier,
        mtu == 0 ? fmt::format("{} does not exist", ps.interface)
        : carrier
            ? fmt::format("{} up, carrier, mtu {}", ps.interface, mtu)
            : fmt::format("{} has no carrier or is down (mtu {}): check the cable, the switch "
                          "port and `ip link show {}`",
                          ps.interface, mtu, ps.interface));
    if (!missing) {
      add(ps.name, "routes", false, "cannot list routes: " + missing.error().what());
    } else {
      std::string gone;
      for (const auto& o : *missing)
        if (o.text.find(fmt::format("table {} ", ps.table)) != std::string::npos ||
            o.text.find(fmt::format("lookup {}", ps.table)) != std::string::npos)
          gone += (gone.empty() ? "" : "; ") + o.text;
      add(ps.name, "routes", gone.empty(),
          gone.empty()
              ? fmt::format("rules and routes of table {} in place", ps.table)
              : "missing (removed by someone else? dpctl policy reload puts them back): " + gone);
    }
    auto h = health_json(i);
    std::string state = h["state"];
    bool usable = state == "up" || state == "ramping";
    add(ps.name, "health", usable,
        fmt::format(
            "{} for {:.0f}s{}", state, h["seconds"].get<double>(),
            h["reason"].get<std::string>().empty() ? "" : ": " + h["reason"].get<std::string>()));
    if (policy_.health.bfd && !h["bfd"].is_null()) {
      const auto& b = h["bfd"];
      std::string st = b["state"];
      add(ps.name, "bfd", st == "up",
          st == "up"
              ? fmt::format("session to {} up", b["peer"].get<std::string>())
              : fmt::format("session to {} is {} (remote {}, diag {}): the peer's "
                            "dualpathd or BFD is not answering over this rail",
                            b["peer"].get<std::string>(), st, b["remote_state"].get<std::string>(),
                            b["diag"].get<std::string>()));
    }
  }
  for (const auto& c : check_node(policy_)) add(c.path, c.what, c.ok, c.detail);
  auto eph = read_ephemeral_ports();
  auto warnings = ephemeral_port_warnings(policy_, eph);
  add("-", "ports", warnings.empty(),
      warnings.empty()
          ? fmt::format("class ports are outside the ephemeral range {}-{} or reserved", eph.lo,
                        eph.hi)
          : warnings.front() +
                (warnings.size() > 1 ? fmt::format(" (and {} more)", warnings.size() - 1) : ""));
  return {{"node", policy_.node},
          {"topology", to_string(policy_.topology)},
          {"checks", checks},
          {"mtu", mtus},
          {"responder", responder_.status()}};
}

json Daemon::status_json() const {
  return json{
      {"node", policy_.node},
      {"version", kVersion},
      {"pid", ::getpid()},
      {"policy",
       {{"file", policy_.file}, {"hash", policy_.hash}, {"disk_hash", policy_disk_hash()}}},
      {"uptime_s",
       std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()},
      {"adopted", datapath_->adopted()},
      {"layout",
       {{"version", DP_LAYOUT_VERSION},
        {"found", datapath_->found_layout()},
        {"upgrade", datapath_->upgrade_report()}}},
      {"bpffs", datapath_->pin_dir()},
      {"generation", datapath_->generation()},
      {"paths", policy_.paths.size()},
      {"classes", policy_.classes.size()},
      {"ticks", ticks_},
      {"paths_carrying", controller_.paths_carrying()},
      {"all_paths_down", controller_.all_down()},
      {"flowlet_gap_us", static_cast<double>(datapath_->flowlet_gap_ns()) / 1000},
      {"placement",
       {{"mode", policy_.topology != Topology::Shared ? "connections"
                 : policy_.scheduler.burst_placement  ? "bursts"
                 : policy_.scheduler.flowcell         ? "cells"
                                                      : "flowlets"},
        {"flowcell_bytes", policy_.scheduler.flowcell},
        {"flowcell_order", policy_.scheduler.flowcell_any_order ? "any" : "keep"},
        {"planned_flows", datapath_->planned_flows()}}},
      {"topology", to_string(policy_.topology)},
      {"steering", render_steering(policy_)},
      {"checks", to_json(checks_)},
      {"connections_reset", connections_reset_},
  };
}

json Daemon::health_json(size_t path) const {
  auto bfd = rails_.bfd(path);
  return render_health(controller_.health(path), bfd ? &*bfd : nullptr, SchedClock::now());
}

json Daemon::paths_json() const {
  json out = json::array();
  const auto& counters = measurements_.counters();
  for (size_t i = 0; i < policy_.paths.size(); ++i) {
    const auto& ps = policy_.paths[i];
    size_t slot = datapath_->rail_slot(i);
    PathView v;
    v.spec = &ps;
    v.slot = static_cast<int>(slot);
    for (size_t c = 0; c < DP_MAX_CLASSES; ++c) {
      const auto& x = counters[slot][c];
      v.sum.tx_bytes += x.tx_bytes;
      v.sum.tx_packets += x.tx_packets;
      v.sum.rx_bytes += x.rx_bytes;
      v.sum.rx_packets += x.rx_packets;
      v.sum.redirect_packets += x.redirect_packets;
      v.sum.redirect_bytes += x.redirect_bytes;
    }
    v.ifindex = static_cast<int>(datapath_->ifindex_of(ps.interface));
    if (v.ifindex) v.tc = datapath_->tc(v.ifindex);
    v.exceptions = measurements_.exceptions()[slot];
    v.measure = measurements_.measure(i);
    v.rdma_devices = measurements_.rdma_devices(i);
    v.datapath_tx_bps = measurements_.datapath_tx_bps(slot);
    v.present = datapath_->present(i);
    v.health = health_json(i);
    out.push_back(render_path(v, Clock::now()));
  }
  return out;
}

json Daemon::classes_json() const {
  json out = json::array();
  auto conns = datapath_->connects();
  for (size_t i = 0; i < policy_.classes.size(); ++i) {
    ClassView v;
    v.spec = &policy_.classes[i];
    v.slot = static_cast<uint32_t>(datapath_->class_slot(i));
    v.topology = policy_.topology;
    v.connections_unmapped = conns[DP_CONNECT_UNMAPPED][v.slot];
    if (auto d = datapath_->decision(i)) v.decision = *d;
    for (auto& g : datapath_->cgroups())
      if (g.klass == i) v.cgroups.push_back({g.rule, g.dir, g.id});
    for (size_t p = 0; p < policy_.paths.size(); ++p) {
      size_t rs = datapath_->rail_slot(p);
      v.paths.push_back({policy_.paths[p].name, rs, measurements_.counters()[rs][v.slot],
                         measurements_.tcp()[rs][v.slot], conns[rs][v.slot]});
    }
    out.push_back(render_class(v));
  }
  return out;
}

json Daemon::flows_json(const json& args) const {
  size_t top = 20;
  if (args.contains("top")) {
    if (!args["top"].is_number_unsigned() || args["top"].get<uint64_t>() == 0)
      return reply_error("bad_request", "\"top\" must be a positive integer");
    top = args["top"].get<size_t>();
  }
  std::optional<std::string> want_class, want_path;
  for (auto [name, dst] : {std::pair{"class", &want_class}, std::pair{"path", &want_path}}) {
    if (!args.contains(name)) continue;
    if (!args[name].is_string())
      return reply_error("bad_request", fmt::format("\"{}\" must be a string", name));
    *dst = args[name].get<std::string>();
  }
  if (want_class && !policy_.klass(*want_class))
    return reply_error("not_found", fmt::format("no class named \"{}\"", *want_class));
  if (want_path && !policy_.path(*want_path))
    return reply_error("not_found", fmt::format("no path named \"{}\"", *want_path));
  std::array<std::string, DP_MAX_CLASSES> cname;
  std::array<std::string, DP_MAX_RAILS> rname;
  for (size_t i = 0; i < policy_.classes.size(); ++i)
    cname[datapath_->class_slot(i)] = policy_.classes[i].name;
  for (size_t i = 0; i < policy_.paths.size(); ++i)
    rname[datapath_->rail_slot(i)] = policy_.paths[i].name;

  size_t total = 0;
  std::vector<FlowRow> rows;
  for (auto& r : datapath_->flows(&total)) {
    if (r.flow.cls >= DP_MAX_CLASSES || r.flow.rail >= DP_MAX_RAILS) continue;
    if (want_class && cname[r.flow.cls] != *want_class) continue;
    if (want_path && rname[r.flow.rail] != *want_path) continue;
    rows.push_back(r);
  }
  std::sort(rows.begin(), rows.end(),
            [](const FlowRow& a, const FlowRow& b) { return a.flow.bytes > b.flow.bytes; });
  if (rows.size() > top) rows.resize(top);
  struct timespec ts {};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // bpf_ktime_get_ns() is CLOCK_MONOTONIC
  uint64_t now_ns =
      static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
  json out = render_flows(rows, total, cname, rname, now_ns);
  // multipath classes: each MPTCP connection with its subflows
  if (multipath_.running()) {
    json conns = json::array();
    for (auto& c : multipath_.connections_json())
      if (!want_class || c["class"] == *want_class) conns.push_back(std::move(c));
    out["mptcp"] = std::move(conns);
  }
  return reply_ok(out);
}

// The hash of the policy file as it is on disk now (null if unreadable):
// edited and not reloaded, it differs from the running policy's.
json Daemon::policy_disk_hash() const {
  std::ifstream in(policy_.file, std::ios::binary);
  if (!in) return nullptr;
  std::stringstream disk;
  disk << in.rdbuf();
  return content_hash(disk.str());
}

// ---------------------------------------------------------------- changes

// The whole class on one path: the decision first, then the controller's
// state; a pin onto a rail without a weight is moved off it again (settle).
Result<void> Daemon::place(size_t klass, size_t path, bool operator_pin) {
  auto w = controller_.place(klass, path, operator_pin);
  DP_TRY(datapath_->write_decision(w.klass, w.shares, w.flags));
  controller_.placed(klass, path, operator_pin);
  settle();
  return {};
}

json Daemon::class_set(const json& args) {
  auto cls = string_arg(args, "class");
  auto path = string_arg(args, "path");
  if (!cls || !path) return reply_error("bad_request", "class.set needs \"class\" and \"path\"");
  int ci = policy_.class_index(*cls);
  if (ci < 0) return reply_error("not_found", fmt::format("no class named \"{}\"", *cls));
  int pi = policy_.path_index(*path);
  if (pi < 0) return reply_error("not_found", fmt::format("no path named \"{}\"", *path));
  auto r = place(static_cast<size_t>(ci), static_cast<size_t>(pi), true);
  if (!r) return reply_error("failed", r.error().what());
  spdlog::info("class {} pinned to path {} by operator", *cls, *path);
  return reply_ok({{"class", *cls}, {"path", *path}, {"pinned", true}});
}

json Daemon::class_unpin(const json& args) {
  auto cls = string_arg(args, "class");
  if (!cls) return reply_error("bad_request", "class.unpin needs \"class\"");
  int i = policy_.class_index(*cls);
  if (i < 0) return reply_error("not_found", fmt::format("no class named \"{}\"", *cls));
  auto ci = static_cast<size_t>(i);
  if (policy_.classes[ci].pinned)
    return reply_error(
        "invalid", fmt::format("{} is pinned by the policy ({}); edit the policy to unpin it", *cls,
                               policy_.file));
  if (auto r = datapath_->clear_operator_pin(ci); !r)
    return reply_error("failed", r.error().what());
  controller_.unpinned(ci);
  if (!policy_.scheduler.adaptive) {
    // static mode has no scheduler to take it back: the policy's rail
    auto prefer = static_cast<size_t>(policy_.path_index(policy_.classes[ci].prefer));
    if (auto r = place(ci, prefer, false); !r) return reply_error("failed", r.error().what());
  }
  spdlog::info(
      "class {} unpinned by operator: {}", *cls,
      policy_.scheduler.adaptive ? "the scheduler decides again" : "back on its preferred rail");
  return reply_ok({{"class", *cls}, {"pinned", false}});
}

json Daemon::drain(const json& args, bool on) {
  const char* cmd = on ? "path.drain" : "path.undrain";
  auto path = string_arg(args, "path");
  if (!path) return reply_error("bad_request", fmt::format("{} needs \"path\"", cmd));
  int i = policy_.path_index(*path);
  if (i < 0) return reply_error("not_found", fmt::format("no path named \"{}\"", *path));
  auto idx = static_cast<size_t>(i);
  if (auto r = controller_.drain(idx, on, SchedClock::now()); !r)
    return reply_error("invalid", r.error().what());
  spdlog::info("path {} {} by operator", *path, on ? "drained" : "undrained");
  settle();
  return reply_ok({{"path", *path}, {"health", health_json(idx)}});
}

// dpctl run: the class's run slice, made now and matched at once, so that
// the first socket of the command is in the class.
json Daemon::class_run(const json& args) {
  auto name = string_arg(args, "class");
  if (!name) return reply_error("bad_request", "class.run needs \"class\"");
  int k = policy_.class_index(*name);
  if (k < 0) return reply_error("not_found", fmt::format("no class named \"{}\"", *name));
  if (datapath_->cgroup_root().empty())
    return reply_error("unavailable", "no cgroup v2 hierarchy is mounted");
  auto dir = make_run_slice(datapath_->cgroup_root(), policy_.node, *name);
  if (!dir) return reply_error("failed", dir.error().what());
  datapath_->refresh_cgroups(policy_);
  RunSlice s = run_slice(policy_.node, *name);
  uint64_t id = 0;
  for (auto& g : datapath_->cgroups())
    if (g.klass == static_cast<size_t>(k) && g.dir == s.dir) id = g.id;
  if (!id) return reply_error("failed", fmt::format("cgroup {} is not matched", *dir));
  json out = {{"class", *name}, {"cgroup", *dir}, {"slice", s.unit}, {"id", id}};
  // a multipath class's sockets are made MPTCP by the kernel hook, or, where
  // the kernel refuses it, by mptcpize's library in the command (dpctl)
  if (policy_.classes[static_cast<size_t>(k)].multipath)
    out["mptcp"] = datapath_->mptcp_conversion_error().empty() ? "kernel" : "preload";
  return reply_ok(out);
}

// dpctl env: launch-time settings for the class's rails now.
json Daemon::class_env(const json& args) const {
  auto name = string_arg(args, "class");
  if (!name) return reply_error("bad_request", "class.env needs \"class\"");
  int k = policy_.class_index(*name);
  if (k < 0) return reply_error("not_found", fmt::format("no class named \"{}\"", *name));
  auto d = datapath_->decision(static_cast<size_t>(k));
  if (!d) return reply_error("failed", d.error().what());
  std::vector<EnvRail> rails;
  for (size_t p = 0; p < policy_.paths.size(); ++p) {
    uint16_t share = d->share[datapath_->rail_slot(p)];
    if (!share) continue;
    EnvRail r{
        policy_.paths[p].name, policy_.paths[p].interface, 100.0 * share / DP_SHARE_SCALE, {}};
    for (auto& port : measurements_.rdma_ports(r.interface))
      r.rdma.push_back(
          {port.device, port.port, roce_v2_gid_index(policy_.measurement.rdma_sysfs, port)});
    rails.push_back(std::move(r));
  }
  std::stable_sort(rails.begin(), rails.end(),
                   [](const EnvRail& a, const EnvRail& b) { return a.share > b.share; });
  auto env = launch_env(*name, policy_.classes[static_cast<size_t>(k)].dscp, rails);
  if (!env) return reply_error("no_rdma", env.error().what());
  return reply_ok(*env);
}

}  // namespace dp

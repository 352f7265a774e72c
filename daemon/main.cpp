// SPDX-License-Identifier: Apache-2.0
// dualpathd: the dualpath traffic-steering daemon.
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <cstdarg>

#include "daemon.h"
#include "dualpath/kernel/node_checks.h"
#include "dualpath/version.h"

namespace {

int libbpf_log(enum libbpf_print_level level, const char* fmt, va_list ap) {
  char buf[4096];
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  std::string_view s(buf, n > 0 ? std::min<size_t>(static_cast<size_t>(n), sizeof(buf) - 1) : 0);
  while (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  if (s.starts_with("libbpf: ")) s.remove_prefix(8);
  // bpf_tc_query on an interface without our filter: expected, not a warning
  // (and bpf_tc_hook_create on an existing clsact, cleanup of a missing
  // one): expected answers to a question we asked, not warnings
  bool expected = false;
  for (auto m : {"Cannot find specified filter chain", "Exclusivity flag on",
                 "Filter with specified priority/protocol not found", "Parent Qdisc doesn't exist"})
    expected |= s.find(m) != std::string_view::npos;
  if (level == LIBBPF_WARN && !expected)
    spdlog::warn("libbpf: {}", s);
  else if (level == LIBBPF_INFO)
    spdlog::debug("libbpf: {}", s);
  else
    spdlog::trace("libbpf: {}", s);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dualpathd - steer inference traffic over two NICs (dualpath " +
               std::string(dp::kVersion) + ")"};
  dp::DaemonOptions opts;
  bool cleanup = false, verbose = false;
  app.add_option("--policy", opts.policy_file, "policy file (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--socket", opts.socket_path, "control socket path")->capture_default_str();
  // Two roles on the control socket (control_server.h). --socket-group is
  // another name of --read-group (its members query, and no more), so a unit
  // that names it gives no one the right to change anything; changes need
  // root or --admin-group.
  std::string admin_group;
  app.add_option("--read-group,--socket-group", opts.socket_group,
                 "group whose members may run queries on the control socket (status, lists, "
                 "events); --socket-group is its earlier name");
  app.add_option("--admin-group", admin_group,
                 "group whose members may also run the commands that change the node (class set, "
                 "policy reload, path drain, ...); root always may");
  app.add_option("--bpffs", opts.bpffs_root, "bpffs root; pins go to ROOT/dualpath/NODE")
      ->capture_default_str();
  app.add_flag("--cleanup", cleanup,
               "remove everything dualpath created for this policy's node, then exit");
  app.add_flag("-v,--verbose", verbose, "debug logging");
  app.set_version_flag("--version", std::string(dp::kVersion));
  CLI11_PARSE(app, argc, argv);

  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  if (verbose) spdlog::set_level(spdlog::level::debug);
  libbpf_set_print(libbpf_log);
  // Nothing the daemon makes (pin directories, its run directory, the
  // socket before its mode is set) is group- or other-writable, whatever
  // umask started it: only root may change the datapath behind its back.
  ::umask(::umask(0) | 022);

  if (cleanup) {
    auto load = dp::load_policy_file(opts.policy_file);
    if (!load.ok()) {
      for (auto& e : load.errors) spdlog::error("{}", e.str());
      return 2;
    }
    auto r = dp::Daemon::cleanup(*load.policy, opts.bpffs_root);
    if (!r) {
      spdlog::error("cleanup: {}", r.error().str());
      return 1;
    }
    spdlog::info("cleanup of node {} done", load.policy->node);
    return 0;
  }

  dp::ControlServer::set_admin_group(admin_group);
  if (auto why = dp::running_kernel_problem(); !why.empty()) {
    spdlog::error("{}", why);
    return 1;
  }
  dp::Daemon d(opts);
  auto r = d.start();
  if (!r) {
    spdlog::error("{}", r.error().str());
    return 1;
  }
  return d.run();
}

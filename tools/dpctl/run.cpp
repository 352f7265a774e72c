// SPDX-License-Identifier: Apache-2.0
// dpctl run --class CLASS -- COMMAND...: a command whose sockets are the
// class's; dpctl env --class CLASS: the launch settings for its RDMA traffic.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "dpctl.h"
#include "dualpath/core/launch_env.h"

namespace dpctl {

namespace {

// dpctl run: the command's process joins the class's run slice, through
// systemd when it is PID 1 (a transient scope in the slice), directly
// otherwise; then it becomes the command. Exit codes as env(1): 125 dpctl,
// 126 not executable, 127 not found.
constexpr const char* kMptcpize = "/usr/bin/mptcpize";

int cmd_run(const Globals& g, const std::string& cls, const std::vector<std::string>& argv) {
  int rc;
  auto d = request(g, "class.run", {{"class", cls}}, &rc);
  if (!d) return 125;
  std::string cgroup = str((*d)["cgroup"]), slice = str((*d)["slice"]);
  std::vector<std::string> args;
  std::error_code ec;
  if (std::filesystem::exists("/run/systemd/system", ec) &&
      ::access("/usr/bin/systemd-run", X_OK) == 0) {
    args = {"/usr/bin/systemd-run", "--scope", "--quiet", "--collect", "--slice=" + slice, "--"};
  } else {
    std::ofstream procs(cgroup + "/cgroup.procs");
    procs << "0\n";  // 0: the writing process
    procs.flush();
    if (!procs) {
      std::cerr << "dpctl: cannot join cgroup " << cgroup << ": " << std::strerror(errno) << "\n";
      return 125;
    }
  }
  if (d->value("mptcp", "") == "preload") {
    // the kernel cannot make the class's sockets MPTCP (no fmod_ret on
    // update_socket_protocol): mptcpize's library does it in the command
    if (::access(kMptcpize, X_OK) != 0) {
      std::cerr << "dpctl: class " << cls
                << " is multipath, and this kernel cannot make its sockets MPTCP; install "
                   "mptcpize (apt install mptcpize) so that dpctl run can\n";
      return 125;
    }
    args.insert(args.end(), {kMptcpize, "run"});
  }
  args.insert(args.end(), argv.begin(), argv.end());
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  ::execvp(cargs[0], cargs.data());
  int err = errno;
  std::cerr << "dpctl: cannot run " << args.front() << ": " << std::strerror(err) << "\n";
  return err == ENOENT ? 127 : 126;
}

int cmd_env(const Globals& g, const std::string& cls, const std::string& format) {
  int rc;
  auto d = request(g, "class.env", {{"class", cls}}, &rc);
  if (!d) return rc;
  if (g.json_out || format == "json") return print_json(g, *d), 0;
  std::cout << "# dualpath: launch settings for class " << cls << " (";
  bool first = true;
  for (auto& r : (*d)["rails"]) {
    std::cout << (first ? "" : ", ") << str(r["path"]) << " "
              << fmt::format("{:.0f}%", r["share"].get<double>()) << " on " << str(r["rdma_device"])
              << ":" << r["rdma_port"] << "/" << str(r["interface"]);
    first = false;
  }
  std::cout << ")\n";
  for (auto& n : (*d)["notes"]) std::cout << "# " << str(n) << "\n";
  std::cout << dp::env_as_shell((*d)["env"]);
  return 0;
}

}  // namespace

void add_run(CLI::App& app, const Globals& g, Action& action) {
  struct Opts {
    std::string run_class, env_class, format = "shell";
    std::vector<std::string> argv;
  };
  auto o = std::make_shared<Opts>();
  auto* run = app.add_subcommand(
      "run", "run a command so that its sockets belong to a class (its cgroup is the class's)");
  run->add_option("--class", o->run_class, "class name")->required()->type_name(kClass);
  run->add_option("COMMAND", o->argv, "the command and its arguments, after --")->required();
  run->callback(
      [&g, &action, o] { action = [&g, o] { return cmd_run(g, o->run_class, o->argv); }; });
  auto* env = app.add_subcommand(
      "env",
      "launch settings (NCCL_*, UCX_*) that put a framework's RDMA traffic on a class's rails");
  env->add_option("--class", o->env_class, "class name")->required()->type_name(kClass);
  env->add_option("--format", o->format, "shell or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"shell", "json"}));
  env->callback(
      [&g, &action, o] { action = [&g, o] { return cmd_env(g, o->env_class, o->format); }; });
}

}  // namespace dpctl

// SPDX-License-Identifier: Apache-2.0
#include "lab_fixture.h"

#include <bpf/libbpf.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <thread>

#include "drop.skel.h"

namespace fs = std::filesystem;

namespace lab {

std::string g_skip;
std::string g_policies;

void write_file(const std::string& p, const std::string& s) { std::ofstream(p) << s; }

void write_file_atomic(const std::string& p, const std::string& s) {
  write_file(p + ".tmp", s);
  fs::rename(p + ".tmp", p);
}

pid_t daemon_pid(const std::string& ns) {
  return static_cast<pid_t>(std::stol("0" + read_file("/run/dualpath-lab/" + ns + ".pid")));
}

void wait_gone(pid_t pid) {
  for (int i = 0; i < 200; ++i) {
    std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
    if (stat.empty() || stat.find(") Z ") != std::string::npos) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ADD_FAILURE() << "process " << pid << " did not exit";
}

std::string nsenter(const std::string& ns) { return "nsenter --net=/run/netns/" + ns + " -- "; }

void restore_lab_routes(const std::string& ns) {
  bool a = ns == "dpl-a";
  std::string me = a ? "1" : "2", peer = a ? "2" : "1";
  sh(nsenter(ns) + "ip route replace 10.99.0." + peer + "/32 via 10.98.0." + peer +
     " dev rail0 src 10.99.0." + me);
  sh(nsenter(ns) + "ip -6 route replace fd99::" + peer + "/128 via fd98:0::" + peer +
     " dev rail0 src fd99::" + me);
}

bool wait_all_up(std::chrono::seconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    bool all = true;
    for (const char* n : {"a", "b"})
      for (auto& p : dpctl(n, "path list")) {
        const json& h = p["health"];
        all = all && h.is_object() && h["state"] == "up" && h["bfd"].is_object() &&
              h["bfd"]["state"] == "up";
      }
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

namespace {
int64_t now_ns() { return std::chrono::steady_clock::now().time_since_epoch().count(); }
}  // namespace

int listen_any(uint16_t port) {
  int l = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l < 0) return -1;
  int one = 1, zero = 0;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  socklen_t len;
  auto a = make_addr("::", port, &len);
  if (::bind(l, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(l, 64) != 0) {
    ::close(l);
    return -1;
  }
  return l;
}

ReconnectingStream::ReconnectingStream(const std::string& a_ns, const std::string& b_ns,
                                       const std::string& dst, uint16_t port, double rate_bps) {
  std::atomic<bool> ready{false};
  server_ = std::thread([this, b_ns, port, &ready] {
    in_netns(b_ns, [&]() -> std::string {
      int l = listen_any(port);
      ready = true;
      std::vector<pollfd> fds{{l, POLLIN, 0}};
      std::vector<int64_t> accepted{0};
      std::vector<char> buf(1 << 16);
      while (!stop_) {
        if (::poll(fds.data(), fds.size(), 20) <= 0) continue;
        for (size_t i = 0; i < fds.size(); ++i) {
          if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          if (i == 0) {
            int c = ::accept4(l, nullptr, nullptr, SOCK_CLOEXEC);
            if (c >= 0) fds.push_back({c, POLLIN, 0}), accepted.push_back(now_ns());
            continue;
          }
          ssize_t n = ::recv(fds[i].fd, buf.data(), buf.size(), 0);
          if (n > 0) {
            received_ += static_cast<uint64_t>(n);
            std::lock_guard lk(mu_);
            reads_.push_back({now_ns(), accepted[i]});
          } else {
            ::close(fds[i].fd);
            fds.erase(fds.begin() + static_cast<long>(i));
            accepted.erase(accepted.begin() + static_cast<long>(i));
            --i;
          }
        }
      }
      for (auto& f : fds) ::close(f.fd);
      return "";
    });
  });
  while (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  client_ = std::thread([this, a_ns, dst, port, rate_bps] {
    in_netns(a_ns, [&]() -> std::string {
      std::vector<char> buf(16384, 'r');
      const auto per_write_d = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::duration<double>(
              rate_bps > 0 ? static_cast<double>(buf.size()) * 8 / rate_bps : 0));
      while (!stop_) {
        socklen_t len;
        auto to = make_addr(dst, port, &len);
        int fd = ::socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        timeval tv{0, 100000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        if (::connect(fd, reinterpret_cast<sockaddr*>(&to), len) == 0) {
          ++connects_;
          auto next = std::chrono::steady_clock::now();
          while (!stop_) {
            ssize_t n = ::send(fd, buf.data(), buf.size(), MSG_NOSIGNAL);
            if (n < 0 && errno != EAGAIN && errno != EINTR) break;
            if (rate_bps > 0) {
              // paced from now on after a send that waited: no catching up in a burst
              next = std::max(next, std::chrono::steady_clock::now() - per_write_d) + per_write_d;
              std::this_thread::sleep_until(next);
            }
          }
        }
        ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return "";
    });
  });
}

ReconnectingStream::~ReconnectingStream() {
  stop_ = true;
  client_.join();
  server_.join();
}

int64_t ReconnectingStream::longest_gap_since(int64_t t) const {
  std::lock_guard lk(mu_);
  int64_t last = t, gap = 0;
  for (auto& r : reads_)
    if (r.at >= t) gap = std::max(gap, r.at - last), last = r.at;
  return std::max(gap, now_ns() - last);
}

int64_t ReconnectingStream::first_new_byte_since(int64_t t) const {
  std::lock_guard lk(mu_);
  for (auto& r : reads_)
    if (r.accepted >= t) return r.at;
  return 0;
}

std::string attach_drop(const std::string& ns, const std::string& dev, uint32_t per_100000,
                        bool detach) {
  return in_netns(ns, [&]() -> std::string {
    LIBBPF_OPTS(bpf_tc_hook, hook, .ifindex = static_cast<int>(if_nametoindex(dev.c_str())),
                .attach_point = BPF_TC_INGRESS);
    LIBBPF_OPTS(bpf_tc_opts, opts, .handle = 2, .priority = 5);
    if (detach) return bpf_tc_detach(&hook, &opts) == 0 ? "" : "cannot detach the drop filter";
    // a clsact of its own where none is (a rail made again, a daemon
    // stopped with its cleanup): the test's, never dualpath's to remove
    if (int e = bpf_tc_hook_create(&hook); e != 0 && e != -EEXIST)
      return "cannot make a clsact qdisc on " + dev;
    drop* skel = drop__open();
    if (!skel) return "cannot open drop.bpf.o";
    skel->rodata->drop_per_100000 = per_100000;
    std::string err;
    if (drop__load(skel) != 0) {
      err = "cannot load drop.bpf.o";
    } else {
      opts.prog_fd = bpf_program__fd(skel->progs.drop_some);
      if (bpf_tc_attach(&hook, &opts) != 0) err = "cannot attach the drop filter";
    }
    drop__destroy(skel);  // the filter keeps the program
    return err;
  });
}

void Env::SetUp() {
  if (geteuid() != 0) {
    g_skip = "lab tests need root (namespaces, BPF, netlink)";
    return;
  }
  if (sh("ip netns list").out.find("dpl-a") != std::string::npos) {
    g_skip = "a lab is already up (yours?); run 'tools/dp-lab down' to let the tests use it";
    return;
  }
  g_policies = fs::temp_directory_path() / ("dplab-" + std::to_string(getpid()));
  fs::create_directories(g_policies);
  const bool separate = topology == "separate";
  const std::vector<std::string> files =
      separate ? std::vector<std::string>{"lab-sep-a.toml", "lab-sep-b.toml"}
               : std::vector<std::string>{"lab-a.toml", "lab-b.toml"};
  for (const auto& f : files) {
    std::string text = std::regex_replace(read_file(std::string(DP_SOURCE_DIR) + "/policies/" + f),
                                          std::regex("mode = \"adaptive\""), "mode = \"static\"");
    write_file(g_policies + "/" + f, edit ? edit(text) : text);
  }
  setenv("DP_LAB_POLICIES", g_policies.c_str(), 1);
  setenv("DP_BUILD", DP_BUILD_DIR, 1);
  auto up = sh(dp_lab() + " up --no-daemon --topology " + topology);
  if (up.rc != 0) {
    g_skip = "dp-lab up failed: " + up.out;
    return;
  }
  if (prepare) {
    if (std::string err = prepare(); !err.empty()) {
      g_skip = err;
      return;
    }
  }
  auto daemons = sh(dp_lab() + " up");
  if (daemons.rc != 0) g_skip = "starting the lab daemons failed: " + daemons.out;
}

void Env::TearDown() {
  if (!g_policies.empty()) {
    sh(dp_lab() + " down");
    fs::remove_all(g_policies);
  }
}

namespace {

std::string lab_state_dir() {
  const char* s = std::getenv("DP_LAB_STATE");
  return s && *s ? s : "/run/dualpath-lab";
}

}  // namespace

void Fixture::mark_daemon_logs() {
  log_marks_.clear();
  for (const char* ns : {"dpl-a", "dpl-b"}) {
    std::string f = lab_state_dir() + "/" + ns + ".log";
    std::error_code ec;
    auto size = fs::file_size(f, ec);
    log_marks_.emplace_back(f, ec ? 0 : size);
  }
}

std::string Fixture::daemon_log(const std::string& ns) const {
  const std::string file = lab_state_dir() + "/" + ns + ".log";
  for (const auto& [f, from] : log_marks_) {
    if (f != file) continue;
    std::ifstream in(f);
    in.seekg(static_cast<std::streamoff>(from));
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  ADD_FAILURE() << "no log of " << ns;
  return {};
}

void Fixture::print_daemon_log() const {
  constexpr int kMaxLines = 40;
  for (const auto& [file, from] : log_marks_) {
    std::ifstream in(file);
    if (!in) continue;
    in.seekg(static_cast<std::streamoff>(from));
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);)
      if (l.find(" debug ") == std::string::npos) lines.push_back(l);
    if (lines.empty()) continue;
    std::printf("    %s: %zu line(s) logged while the test ran%s\n", file.c_str(), lines.size(),
                lines.size() > kMaxLines ? " (the last 40)" : "");
    size_t first = lines.size() > kMaxLines ? lines.size() - kMaxLines : 0;
    for (size_t i = first; i < lines.size(); ++i) std::printf("      %s\n", lines[i].c_str());
  }
}

void Fixture::expect_on(int rail, std::pair<uint64_t, uint64_t> d, uint64_t bytes,
                        const std::string& what) {
  uint64_t on = rail == 0 ? d.first : d.second, off = rail == 0 ? d.second : d.first;
  EXPECT_GE(on, bytes) << what << ": rail" << rail << " sent " << on << " bytes";
  EXPECT_LT(off, bytes / 20) << what << ": the other rail sent " << off << " bytes";
}

json Fixture::klass(const std::string& node, const std::string& name) {
  for (auto& c : dpctl(node, "class list"))
    if (c["name"] == name) return c;
  ADD_FAILURE() << "no class " << name;
  return {};
}

}  // namespace lab

// SPDX-License-Identifier: Apache-2.0
#include "control_server.h"

#include <endian.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "dualpath/client/control_socket.h"

namespace dp {

void CommandTable::add(Command c) { commands_.push_back(std::move(c)); }

namespace {

bool fits(const json& v, ArgType t) {
  switch (t) {
    case ArgType::String:
      return v.is_string();
    case ArgType::Positive:
      return v.is_number_unsigned() && v.get<uint64_t>() > 0;
    case ArgType::Unsigned:
      return v.is_number_unsigned();
    case ArgType::Bool:
      return v.is_boolean();
  }
  return false;
}

std::string_view must_be(const Arg& a) {
  if (!a.must_be.empty()) return a.must_be;
  switch (a.type) {
    case ArgType::String:
      return "a string";
    case ArgType::Positive:
      return "a positive integer";
    case ArgType::Unsigned:
      return "an integer of 0 or more";
    case ArgType::Bool:
      return "true or false";
  }
  return "";
}

// The refusal of arguments that do not fit the command's, or null.
json check_args(const Command& c, const json& args) {
  bool missing = false;
  std::string names;
  for (const auto& a : c.args) {
    if (!a.required) continue;
    names += fmt::format("{}\"{}\"", names.empty() ? "" : " and ", a.name);
    auto it = args.find(a.name);
    missing = missing || it == args.end() || !fits(*it, a.type);
  }
  if (missing) return reply_error(ErrorCode::BadRequest, fmt::format("{} needs {}", c.name, names));
  for (const auto& a : c.args) {
    auto it = args.find(a.name);
    if (!a.required && it != args.end() && !fits(*it, a.type))
      return reply_error(ErrorCode::BadRequest,
                         fmt::format("\"{}\" must be {}", a.name, must_be(a)));
  }
  return nullptr;
}

}  // namespace

Result<void> SocketRoles::resolve() {
  auto look_up = [](const std::string& name, const char* option) -> Result<std::optional<gid_t>> {
    if (name.empty()) return std::optional<gid_t>{};
    const ::group* gr = ::getgrnam(name.c_str());
    if (!gr) return DP_ERROR("{} {}: no such group", option, name);
    return std::optional<gid_t>{gr->gr_gid};
  };
  auto a = look_up(admin_group, "--admin-group");
  if (!a) return a.error();
  auto r = look_up(read_group, "--read-group (or --socket-group)");
  if (!r) return r.error();
  admin_gid = *a;
  read_gid = *r;
  return {};
}

Role SocketRoles::role_of(uid_t uid, std::span<const gid_t> groups) const {
  auto in = [&](const std::optional<gid_t>& g) {
    return g && std::find(groups.begin(), groups.end(), *g) != groups.end();
  };
  // root, and the daemon's own user (a daemon run without root, as in tests)
  if (uid == 0 || uid == ::geteuid() || in(admin_gid)) return Role::Admin;
  if (in(read_gid)) return Role::Reader;
  return Role::None;
}

std::string SocketRoles::refusal(std::string_view cmd, bool mutates, Role role) const {
  std::string admins = admin_gid
                           ? fmt::format("root or a member of group {}", admin_group)
                           : std::string("root (dualpathd was started without --admin-group)");
  if (mutates)
    return fmt::format("{} changes the node: it needs {}{}", cmd, admins,
                       role == Role::Reader ? "; this client may only query" : "");
  if (read_gid && admin_gid && *read_gid != *admin_gid)
    return fmt::format("{} needs root or a member of group {} or {}", cmd, read_group, admin_group);
  if (read_gid) return fmt::format("{} needs root or a member of group {}", cmd, read_group);
  return fmt::format("{} needs {}", cmd, admins);
}

namespace {

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59  // Linux 4.13
#endif

// The supplementary groups of a process, from its Groups: line.
Result<std::vector<gid_t>> proc_groups(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (!line.starts_with("Groups:")) continue;
    std::istringstream words(line.substr(7));
    std::vector<gid_t> out;
    for (unsigned long g; words >> g;) out.push_back(static_cast<gid_t>(g));
    return out;
  }
  return DP_ERROR("no Groups: line in /proc/{}/status", pid);
}

}  // namespace

Result<PeerCredentials> peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return DP_SYS_ERROR(errno, "SO_PEERCRED failed");
  PeerCredentials p;
  p.pid = cred.pid;
  p.uid = cred.uid;
  p.groups.push_back(cred.gid);
  std::vector<gid_t> groups(64);
  for (;;) {
    len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      break;
    }
    if (errno == ERANGE && len / sizeof(gid_t) > groups.size()) {
      groups.resize(len / sizeof(gid_t));  // the kernel said how many
      continue;
    }
    if (errno != ENOPROTOOPT) return DP_SYS_ERROR(errno, "SO_PEERGROUPS failed");
    auto from_proc = proc_groups(cred.pid);
    if (!from_proc) return from_proc.error();
    groups = std::move(*from_proc);
    break;
  }
  p.groups.insert(p.groups.end(), groups.begin(), groups.end());
  return p;
}

json CommandTable::dispatch(const json& req, Role role, const SocketRoles& roles,
                            pid_t peer) const {
  if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string())
    return reply_error(ErrorCode::BadRequest, "a request is a JSON object with a string \"cmd\"");
  const std::string cmd = req["cmd"];
  const json args = req.value("args", json::object());
  if (!args.is_object()) return reply_error(ErrorCode::BadRequest, "\"args\" must be an object");
  for (const auto& c : commands_) {
    if (c.name != cmd) continue;
    if (role == Role::None || (c.mutates && role != Role::Admin))
      return reply_error(ErrorCode::PermissionDenied, roles.refusal(cmd, c.mutates, role));
    if (json refused = check_args(c, args); !refused.is_null()) return refused;
    return c.peer_handler ? c.peer_handler(args, peer) : c.handler(args);
  }
  return reply_error(ErrorCode::UnknownCommand, fmt::format("unknown command \"{}\"", cmd));
}

size_t json_depth(std::string_view line) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : line) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((ch == ']' || ch == '}') && depth) {
      --depth;
    }
  }
  return deepest;
}

namespace {

// The admin group of listen(path, read_group).
std::string& default_admin_group() {
  static std::string group;
  return group;
}

// Adds a group to the file's ACL with rw, beside its owner (rw), its owning
// group (rw) and others (none): a system.posix_acl_access value as the kernel
// reads it (little-endian; entries by tag, then id).
Result<void> admit_group(const std::string& path, gid_t gid) {
  struct Entry {
    uint16_t tag, perm;
    uint32_t id;
  };
  constexpr uint16_t kUserObj = 0x01, kGroupObj = 0x04, kGroup = 0x08, kMask = 0x10, kOther = 0x20,
                     kRw = 4 | 2;
  constexpr uint32_t kNoId = static_cast<uint32_t>(-1);
  const Entry entries[] = {{kUserObj, kRw, kNoId},
                           {kGroupObj, kRw, kNoId},
                           {kGroup, kRw, static_cast<uint32_t>(gid)},
                           {kMask, kRw, kNoId},
                           {kOther, 0, kNoId}};
  std::string value;
  auto put = [&](const void* p, size_t n) { value.append(static_cast<const char*>(p), n); };
  uint32_t version = htole32(2);
  put(&version, sizeof(version));
  for (const auto& e : entries) {
    uint16_t tag = htole16(e.tag), perm = htole16(e.perm);
    uint32_t id = htole32(e.id);
    put(&tag, sizeof(tag));
    put(&perm, sizeof(perm));
    put(&id, sizeof(id));
  }
  if (::setxattr(path.c_str(), "system.posix_acl_access", value.data(), value.size(), 0) != 0)
    return DP_SYS_ERROR(errno, "adding group {} to the ACL of {} failed", gid, path);
  return {};
}

}  // namespace

void ControlServer::set_admin_group(std::string group) { default_admin_group() = std::move(group); }

Result<std::unique_ptr<ControlServer>> ControlServer::listen(const std::string& path,
                                                             const std::string& read_group) {
  return listen(path, SocketRoles{default_admin_group(), read_group, {}, {}});
}

Result<std::unique_ptr<ControlServer>> ControlServer::listen(const std::string& path,
                                                             SocketRoles roles) {
  DP_TRY(roles.resolve());
  std::unique_ptr<ControlServer> s(new ControlServer);
  auto lfd = listen_unix(path, 0660);
  if (!lfd) return lfd.error();
  s->listen_fd_ = std::move(*lfd);
  s->path_ = path;
  // the file's group: the read group, or the admin group without one
  auto owner = roles.read_gid ? roles.read_gid : roles.admin_gid;
  if (owner && ::chown(path.c_str(), static_cast<uid_t>(-1), *owner) != 0)
    return DP_SYS_ERROR(errno, "giving {} to group {} failed", path,
                        roles.read_gid ? roles.read_group : roles.admin_group);
  if (roles.read_gid && roles.admin_gid && *roles.read_gid != *roles.admin_gid) {
    if (auto r = admit_group(path, *roles.admin_gid); !r) {
      // not more open than asked: the admins who are not readers too cannot
      // connect, and are told so here
      if (r.error().code != EOPNOTSUPP) return r.error();
      spdlog::warn(
          "{} is on a filesystem without POSIX ACLs: members of group {} who are not also in "
          "group {} cannot connect to it",
          path, roles.admin_group, roles.read_group);
    }
  }
  if (roles.admin_gid)
    spdlog::info("root and members of group {} may run every command on {}", roles.admin_group,
                 path);
  if (roles.read_gid && roles.read_gid != roles.admin_gid)
    spdlog::info("members of group {} may query {}{}", roles.read_group, path,
                 roles.admin_gid ? "" : "; changes need root");
  s->roles_ = std::move(roles);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) s->ino_ = st.st_ino;
  return s;
}

ControlServer::~ControlServer() { close(); }

void ControlServer::serve(EventLoop& loop, const CommandTable& table) {
  loop_ = &loop;
  table_ = &table;
  loop.watch(listen_fd_.get(), [this] { accept_clients(); });
  loop.add_deadline([this]() -> std::optional<SchedClock::time_point> {
    if (has_work()) return SchedClock::now();  // more requests wait: do not sleep
    std::optional<SchedClock::time_point> idle;
    for (auto& [fd, c] : clients_)
      if (!idle || c.active + kIdle < *idle) idle = c.active + kIdle;
    return idle;
  });
  loop.after_wake([this] { pump(); });
}

void ControlServer::close() {
  if (loop_) {
    for (auto& [fd, c] : clients_) loop_->unwatch(fd);
    if (listen_fd_.valid()) loop_->unwatch(listen_fd_.get());
  }
  clients_.clear();
  loop_ = nullptr;
  if (!listen_fd_.valid()) return;
  listen_fd_.reset(-1);
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0 && st.st_ino == ino_) ::unlink(path_.c_str());
}

void ControlServer::accept_clients() {
  for (;;) {
    int c = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // the connection stays queued and the socket readable: stop watching
        // it until a client goes, or the loop would spin
        if (last_accept_error_ != std::strerror(errno))
          spdlog::warn("control socket: not accepting clients for now: {}", std::strerror(errno));
        last_accept_error_ = std::strerror(errno);
        loop_->unwatch(listen_fd_.get());
        paused_ = true;
      }
      return;
    }
    if (clients_.size() >= kMaxClients) {
      std::string out =
          reply_error(ErrorCode::Failed, fmt::format("too many clients (at most {})", kMaxClients))
              .dump() +
          "\n";
      (void)::send(c, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(c);
      continue;
    }
    Client cl;
    cl.fd.reset(c);
    // the credentials the kernel recorded at connect(): they cannot change
    // over the connection, so they are read once and checked per request
    if (auto peer = peer_credentials(c)) {
      cl.role = roles_.role_of(peer->uid, peer->groups);
      cl.pid = peer->pid;
    } else {
      spdlog::warn("control socket: a client's credentials are unknown ({}): it may run nothing",
                   peer.error().str());
    }
    cl.active = std::chrono::steady_clock::now();
    loop_->watch(c, [this, c] { on_readable(c); });
    clients_.emplace(c, std::move(cl));
  }
}

void ControlServer::drop(int fd) {
  loop_->unwatch(fd);
  clients_.erase(fd);
  if (paused_) {  // a descriptor came free
    paused_ = false;
    last_accept_error_.clear();
    loop_->watch(listen_fd_.get(), [this] { accept_clients(); });
  }
}

void ControlServer::on_readable(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& cl = it->second;
  char buf[65536];
  ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
  if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
    drop(fd);
    return;
  }
  if (r > 0) cl.in.append(buf, static_cast<size_t>(r));
  // a line longer than the limit is refused without waiting for its end
  size_t nl = cl.in.find('\n');
  if ((nl == std::string::npos ? cl.in.size() : nl) > kMaxRequestBytes) {
    cl.in.clear();
    cl.out +=
        reply_error(ErrorCode::BadRequest, "request too large (limit 64 KiB per line)").dump() +
        "\n";
    cl.closing = true;
    flush(cl);
  }
}

bool ControlServer::has_work() const {
  for (auto& [fd, c] : clients_)
    if (c.out.empty() && !c.closing && c.in.find('\n') != std::string::npos) return true;
  return false;
}

void ControlServer::pump() {
  if (!loop_) return;
  auto start = std::chrono::steady_clock::now();
  // round-robin: one request per client per turn, until the budget is spent
  for (bool any = true; any && std::chrono::steady_clock::now() - start < kBudget;) {
    any = false;
    auto it = clients_.upper_bound(next_);
    for (size_t n = clients_.size(); n-- && std::chrono::steady_clock::now() - start < kBudget;) {
      if (it == clients_.end()) it = clients_.begin();
      if (it == clients_.end()) break;
      Client& cl = it->second;
      next_ = it->first;
      ++it;
      size_t nl;
      if (!cl.out.empty() || cl.closing || (nl = cl.in.find('\n')) == std::string::npos) continue;
      std::string line = cl.in.substr(0, nl);
      cl.in.erase(0, nl + 1);
      cl.active = std::chrono::steady_clock::now();
      json reply;
      if (json_depth(line) > kMaxDepth) {
        reply = reply_error(ErrorCode::BadRequest,
                            fmt::format("the request is nested deeper than {} levels", kMaxDepth));
      } else {
        json req = json::parse(line, nullptr, false);
        reply = req.is_discarded()
                    ? reply_error(ErrorCode::BadRequest, "the request is not valid JSON")
                    : table_->dispatch(req, cl.role, roles_, cl.pid);
      }
      cl.out += reply.dump() + "\n";
      flush(cl);  // may drop the client
      any = true;
    }
  }
  // clients that sent no complete request for kIdle
  auto now = std::chrono::steady_clock::now();
  std::vector<int> idle;
  for (auto& [fd, c] : clients_)
    if (now - c.active > kIdle && c.out.empty()) idle.push_back(fd);
  for (int fd : idle) drop(fd);
}

// Sends what it can without blocking; the rest waits for the socket to be
// writable, and the client is not read meanwhile.
void ControlServer::flush(Client& cl) {
  int fd = cl.fd.get();
  while (!cl.out.empty()) {
    ssize_t w = ::send(fd, cl.out.data(), cl.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      cl.out.erase(0, static_cast<size_t>(w));
      continue;
    }
    if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
    drop(fd);
    return;
  }
  if (cl.out.size() > kMaxPending) {
    spdlog::warn("control socket: a client that does not read its replies was dropped");
    drop(fd);
    return;
  }
  if (cl.out.empty()) {
    if (cl.closing) {
      drop(fd);
      return;
    }
    loop_->stop_write(fd);
  } else {
    loop_->want_write(
        fd, [this, fd] { on_writable(fd); }, false);
  }
}

void ControlServer::on_writable(int fd) {
  auto it = clients_.find(fd);
  if (it != clients_.end()) flush(it->second);
}

}  // namespace dp

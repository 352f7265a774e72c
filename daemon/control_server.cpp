#include "control_server.h"

#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "dualpath/client/control_socket.h"

namespace dp {

void CommandTable::add(Command c) { commands_.push_back(std::move(c)); }

json CommandTable::dispatch(const json& req, bool privileged) const {
  if (!req.is_object() || !req.contains("cmd") || !req["cmd"].is_string())
    return reply_error("bad_request", "a request is a JSON object with a string \"cmd\"");
  const std::string cmd = req["cmd"];
  const json args = req.value("args", json::object());
  if (!args.is_object()) return reply_error("bad_request", "\"args\" must be an object");
  for (const auto& c : commands_) {
    if (c.name != cmd) continue;
    if (c.mutates && !privileged)
      return reply_error("permission_denied", fmt::format("{} needs root", cmd));
    return c.handler(args);
  }
  return reply_error("unknown_command", fmt::format("unknown command \"{}\"", cmd));
}

std::optional<std::string> string_arg(const json& args, const char* name) {
  if (!args.contains(name) || !args[name].is_string()) return std::nullopt;
  return args[name].get<std::string>();
}

namespace {

// A reply larger than the socket buffer (events, flows) is sent in pieces;
// a client that does not read for a second is dropped.
bool send_reply(int fd, const std::string& out) {
  size_t off = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (off < out.size()) {
    ssize_t w = ::send(fd, out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (w > 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno != EAGAIN && errno != EINTR) return false;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    pollfd p{fd, POLLOUT, 0};
    if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<ControlServer>> ControlServer::listen(const std::string& path,
                                                             const std::string& group) {
  std::unique_ptr<ControlServer> s(new ControlServer);
  auto lfd = listen_unix(path, 0660);
  if (!lfd) return lfd.error();
  s->listen_fd_ = std::move(*lfd);
  s->path_ = path;
  if (!group.empty()) {
    const ::group* gr = ::getgrnam(group.c_str());
    if (!gr) return DP_ERROR("--socket-group {}: no such group", group);
    if (::chown(path.c_str(), static_cast<uid_t>(-1), gr->gr_gid) != 0)
      return DP_SYS_ERROR(errno, "giving {} to group {} failed", path, group);
    spdlog::info("members of group {} may query {}; changes need root", group, path);
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) s->ino_ = st.st_ino;
  return s;
}

ControlServer::~ControlServer() { close(); }

void ControlServer::serve(EventLoop& loop, const CommandTable& table) {
  loop_ = &loop;
  table_ = &table;
  loop.watch(listen_fd_.get(), [this] { accept_clients(); });
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
  int c;
  while ((c = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0) {
    ucred cred{};
    socklen_t len = sizeof(cred);
    Client cl;
    cl.fd.reset(c);
    cl.privileged = getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == 0;
    loop_->watch(c, [this, c] { on_readable(c); });
    clients_.emplace(c, std::move(cl));
  }
}

void ControlServer::on_readable(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  Client& cl = it->second;
  char buf[8192];
  ssize_t r = ::recv(fd, buf, sizeof(buf), 0);
  bool close_it = r == 0 || (r < 0 && errno != EAGAIN);
  if (r > 0) cl.in.append(buf, static_cast<size_t>(r));
  size_t nl;
  while (!close_it && (nl = cl.in.find('\n')) != std::string::npos) {
    json req = json::parse(cl.in.substr(0, nl), nullptr, false);
    cl.in.erase(0, nl + 1);
    json reply = req.is_discarded() ? reply_error("bad_request", "the request is not valid JSON")
                                    : table_->dispatch(req, cl.privileged);
    if (!send_reply(fd, reply.dump() + "\n")) close_it = true;
  }
  if (!close_it && cl.in.size() > kMaxRequestBytes) {
    std::string out =
        reply_error("bad_request", "request too large (limit 64 KiB per line)").dump() + "\n";
    (void)::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
    close_it = true;
  }
  if (close_it) {
    loop_->unwatch(fd);
    clients_.erase(it);
  }
}

}  // namespace dp

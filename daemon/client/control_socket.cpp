// SPDX-License-Identifier: Apache-2.0
#include "dualpath/client/control_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

namespace dp {

namespace {

Result<sockaddr_un> unix_addr(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path))
    return DP_ERROR("socket path {} is too long (at most {} bytes)", path, sizeof(a.sun_path) - 1);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

}  // namespace

Result<Fd> listen_unix(const std::string& path, unsigned mode) {
  auto addr = unix_addr(path);
  if (!addr) return addr.error();
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) return DP_SYS_ERROR(errno, "creating the control socket failed");
  // A socket file left by a daemon that died is stale when nobody accepts on it.
  if (std::filesystem::exists(path, ec)) {
    Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) == 0)
      return DP_ERROR("another dualpathd is already serving {}", path);
    ::unlink(path.c_str());
  }
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0)
    return DP_SYS_ERROR(errno, "binding the control socket {} failed", path);
  if (::chmod(path.c_str(), mode) != 0)
    return DP_SYS_ERROR(errno, "setting the mode of {} failed", path);
  if (::listen(fd.get(), 16) != 0) return DP_SYS_ERROR(errno, "listening on {} failed", path);
  return fd;
}

Result<json> call(const std::string& socket_path, const json& request, int timeout_ms) {
  auto addr = unix_addr(socket_path);
  if (!addr) return addr.error();
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return DP_SYS_ERROR(errno, "creating a socket failed");
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    int err = errno;
    if (err == EACCES || err == EPERM)
      return DP_SYS_ERROR(err,
                          "no permission to use dualpathd's socket {} (root may, and members of "
                          "the groups the daemon was given with --read-group and --admin-group)",
                          socket_path);
    return DP_SYS_ERROR(err, "cannot reach dualpathd at {} (is it running?)", socket_path);
  }
  std::string out = request.dump() + "\n";
  for (size_t off = 0; off < out.size();) {
    ssize_t n = ::send(fd.get(), out.data() + off, out.size() - off, MSG_NOSIGNAL);
    if (n < 0) return DP_SYS_ERROR(errno, "sending the request to {} failed", socket_path);
    off += static_cast<size_t>(n);
  }
  std::string in;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[65536];
  while (in.find('\n') == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return DP_SYS_ERROR(ETIMEDOUT, "dualpathd at {} did not answer", socket_path);
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n <= 0)
      return DP_SYS_ERROR(n == 0 ? EPIPE : errno, "reading the reply from {} failed", socket_path);
    in.append(buf, static_cast<size_t>(n));
  }
  json reply = json::parse(in.substr(0, in.find('\n')), nullptr, false);
  if (reply.is_discarded() || !reply.is_object())
    return DP_ERROR("dualpathd at {} sent a reply that is not JSON", socket_path);
  return reply;
}

}  // namespace dp

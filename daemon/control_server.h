// SPDX-License-Identifier: Apache-2.0
// The control socket's server side: the listening socket, its clients, the
// framing of requests (one JSON object per line) and the sending of replies.
// No client can stall the daemon's loop (BFD and the tick share it): requests
// are handled a few milliseconds' worth per loop pass, round-robin over
// clients; replies are sent without blocking, and a client with replies
// pending is not read until it takes them; clients are capped, idle ones are
// closed, and running out of file descriptors pauses accepting instead of
// spinning.
// What a request does is the CommandTable's: each command is declared once
// (daemon/commands/), with its name, whether it changes anything, a summary,
// its arguments and its handler, so privileges and argument checks are
// properties of the command, not lists kept by hand.
//
// Who may steer. Two roles, decided from the peer's credentials as the kernel
// recorded them at connect (SO_PEERCRED's uid and gid, SO_PEERGROUPS'
// supplementary groups), checked on every request against the command's
// `mutates`:
//   admin   root (and the daemon's own user), and members of the admin
//           group: every command;
//   reader  members of the read group: queries only.
// A refused request gets a permission_denied reply that names the command and
// the group it needs; the connection stays open for what the peer may do.
// The socket file is the first gate, so that nobody else reaches the parser:
// it is root:<read group> 0660, and the admin group gets rw through a POSIX
// ACL entry (one file has one group; the ACL admits the second). Without a
// read group it is root:<admin group> 0660; without either, root's alone.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/core/protocol.h"
#include "dualpath/core/result.h"
#include "event_loop.h"

namespace dp {

struct Command {
  std::string name;      // object.verb
  bool mutates = false;  // only an admin (root or the admin group) may run it
  std::string summary;
  std::vector<Arg> args;
  std::function<json(const json& args)> handler;  // returns a whole reply; args fit `args`
  // instead of handler, for a command that needs to know who asked: the
  // peer's pid as the kernel recorded it at connect (0 where unknown)
  std::function<json(const json& args, pid_t peer)> peer_handler = {};
};

// What a peer of the control socket may run.
enum class Role {
  None,    // nothing: neither root nor a member of either group
  Reader,  // queries
  Admin,   // every command
};

// The groups of the control socket's two roles (root is always an admin).
struct SocketRoles {
  std::string admin_group;                   // may run every command; empty: root only
  std::string read_group;                    // may run queries; empty: admins only
  std::optional<gid_t> admin_gid, read_gid;  // resolved by resolve()

  // Looks both groups up; an unknown name is an error naming its option.
  Result<void> resolve();
  // The role of a peer: its uid, and every group it is in (the primary one
  // and the supplementary ones).
  Role role_of(uid_t uid, std::span<const gid_t> groups) const;
  // Why `role` may not run `cmd`, for the reply: the group it needs.
  std::string refusal(std::string_view cmd, bool mutates, Role role) const;
};

// A connected peer's credentials as the kernel recorded them at connect():
// uid and gid (SO_PEERCRED) and its groups (SO_PEERGROUPS; on kernels before
// 4.13, the Groups: line of /proc/PID/status, which a pid reused since the
// connect would make wrong).
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = static_cast<uid_t>(-1);
  std::vector<gid_t> groups;  // the primary gid first
};
Result<PeerCredentials> peer_credentials(int fd);

class CommandTable {
 public:
  void add(Command c);
  // One request, as the socket delivers it: errors for a request that is not
  // an object with a string "cmd" and object "args", an unknown command, a
  // command the peer's role may not run (the reply says which group it
  // needs, from `roles`), or arguments that do not fit the command's.
  json dispatch(const json& request, Role role, const SocketRoles& roles = {},
                pid_t peer = 0) const;
  // privileged: an admin; otherwise a reader.
  json dispatch(const json& request, bool privileged) const {
    return dispatch(request, privileged ? Role::Admin : Role::Reader);
  }
  const std::vector<Command>& commands() const { return commands_; }

 private:
  std::vector<Command> commands_;
};

// A request line's nesting depth, without parsing it (JSON's own recursion
// would follow a deeply nested line down the stack).
size_t json_depth(std::string_view line);

class ControlServer {
 public:
  static constexpr size_t kMaxClients = 64;
  static constexpr std::chrono::seconds kIdle{60};  // no complete request for this long: closed
  static constexpr std::chrono::milliseconds kBudget{10};  // request handling per loop pass
  static constexpr size_t kMaxDepth = 32;                  // nesting of a request
  static constexpr size_t kMaxPending = 64u << 20;         // replies waiting for a client
  // Claims the socket: fails if another daemon serves it, or if a group of
  // `roles` does not exist. The socket is 0660, its group the read group (or
  // the admin group without one), the admin group admitted by an ACL entry.
  static Result<std::unique_ptr<ControlServer>> listen(const std::string& path, SocketRoles roles);
  // Members of `read_group` (if not empty) query; the admin group is the one
  // set_admin_group() gave, the daemon's --admin-group.
  static Result<std::unique_ptr<ControlServer>> listen(const std::string& path,
                                                       const std::string& read_group);
  // The admin group of listen(path, read_group): the daemon's option, set by
  // main() before the daemon starts (the daemon's options carry one group).
  static void set_admin_group(std::string group);
  ~ControlServer();
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  // Serves `table` from `loop` until close().
  void serve(EventLoop& loop, const CommandTable& table);
  // Stops serving; unlinks the socket only if it is still ours.
  void close();
  const std::string& path() const { return path_; }

 private:
  struct Client {
    Fd fd;
    std::string in;          // bytes read, not yet handled
    std::string out;         // replies not yet sent
    Role role = Role::None;  // from the peer's credentials at connect
    pid_t pid = 0;           // the peer's, at connect
    bool closing = false;    // after `out`, close
    std::chrono::steady_clock::time_point active;
  };
  ControlServer() = default;
  void accept_clients();
  void on_readable(int fd);
  void on_writable(int fd);
  // Handles buffered requests within kBudget; closes idle clients.
  void pump();
  bool has_work() const;
  void flush(Client& c);
  void drop(int fd);

  std::string path_;
  SocketRoles roles_;
  Fd listen_fd_;
  ino_t ino_ = 0;  // unlink the socket at exit only if it is still ours
  EventLoop* loop_ = nullptr;
  const CommandTable* table_ = nullptr;
  std::map<int, Client> clients_;
  int next_ = -1;        // round-robin: the client after this fd goes first
  bool paused_ = false;  // not accepting: out of file descriptors
  std::string last_accept_error_;
};

}  // namespace dp

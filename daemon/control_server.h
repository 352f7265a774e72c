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
// (daemon/commands/), with its name, whether it changes anything (then only
// root may run it), a summary, its arguments and its handler, so privileges
// and argument checks are properties of the command, not lists kept by hand.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "dualpath/core/protocol.h"
#include "dualpath/core/result.h"
#include "event_loop.h"

namespace dp {

struct Command {
  std::string name;      // object.verb
  bool mutates = false;  // only root (uid 0 by SO_PEERCRED) may run it
  std::string summary;
  std::vector<Arg> args;
  std::function<json(const json& args)> handler;  // returns a whole reply; args fit `args`
};

class CommandTable {
 public:
  void add(Command c);
  // One request, as the socket delivers it: errors for a request that is not
  // an object with a string "cmd" and object "args", an unknown command, a
  // mutating command from an unprivileged peer, or arguments that do not fit
  // the command's.
  json dispatch(const json& request, bool privileged) const;
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
  // Claims the socket: fails if another daemon serves it. Members of `group`
  // (if not empty) may connect; the socket is 0660.
  static Result<std::unique_ptr<ControlServer>> listen(const std::string& path,
                                                       const std::string& group);
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
    std::string in;   // bytes read, not yet handled
    std::string out;  // replies not yet sent
    bool privileged = false;
    bool closing = false;  // after `out`, close
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

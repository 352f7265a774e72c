// SPDX-License-Identifier: Apache-2.0
// The MPTCP userspace path manager over the kernel's mptcp_pm generic netlink
// family (Linux 5.19; linux/mptcp.h): the events of every MPTCP connection
// of this network namespace, and the commands that make, remove and re-prioritise
// a connection's subflows. libnl-genl-3 carries the messages.
//
// The namespace's path manager must be the userspace one
// (net.mptcp.path_manager = "userspace"); the kernel then accepts a peer's
// joins only while someone listens to the events group, which this does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "dualpath/core/multipath.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/result.h"
#include "dualpath/kernel/netlink.h"

struct nl_msg;

namespace dp::mptcp {

enum class EventType : uint8_t {
  Created = 1,
  Established = 2,
  Closed = 3,
  Announced = 6,
  Removed = 7,
  SubEstablished = 10,
  SubClosed = 11,
  SubPriority = 13,
  Other = 255,
};

using Subflow = multipath::Ends;

struct Event {
  EventType type = EventType::Other;
  uint32_t token = 0;
  Subflow flow;  // the (first) subflow's ends; empty for Closed
  int ifindex = 0;
  bool backup = false;
  bool server_side = false;  // the connection was accepted here
  int error = 0;             // SubClosed: why
};

class PathManager {
 public:
  // Both sockets in this network namespace: commands, and events (joined to
  // the mptcp_pm_events group, non-blocking). Needs CAP_NET_ADMIN.
  static Result<std::unique_ptr<PathManager>> open();
  PathManager(const PathManager&) = delete;
  PathManager& operator=(const PathManager&) = delete;

  int event_fd() const;
  // Every event waiting; returns how many were read.
  Result<size_t> read_events(const std::function<void(const Event&)>& on);

  // A subflow from `local`:lport (bound to ifindex; lport 0: the kernel
  // picks one) to remote:rport, with the backup flag from the start
  // (MP_JOIN's B bit). `id` is the local address's id for the connection
  // (0: the kernel's); one id is one address and port.
  Result<void> create(uint32_t token, const IpAddr& local, uint16_t lport, uint8_t id, int ifindex,
                      bool backup, const IpAddr& remote, uint16_t rport);
  Result<void> destroy(uint32_t token, const Subflow& s);
  // MP_PRIO: the subflow is used only when no active one is left (backup).
  Result<void> set_backup(uint32_t token, const Subflow& s, bool backup);

 private:
  PathManager() = default;
  Result<void> command(uint8_t cmd, const std::function<Result<void>(nl_msg*)>& fill,
                       const std::string& what);
  NlSocket cmd_, events_;
  int family_ = 0;
};

}  // namespace dp::mptcp

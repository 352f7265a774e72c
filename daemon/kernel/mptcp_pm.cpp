// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/mptcp_pm.h"

#include <linux/mptcp.h>
#include <netlink/errno.h>
#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>
#include <sys/socket.h>

#include <cstring>

namespace dp::mptcp {

namespace {

// The events' flag for a connection accepted here (Linux 6.12 and later say
// it in MPTCP_ATTR_FLAGS, earlier ones in MPTCP_ATTR_SERVER_SIDE).
constexpr uint16_t kEventFlagServerSide = 1u << 0;

Result<void> put_addr(nl_msg* m, int attr, const IpAddr& a, uint16_t port, int ifindex,
                      uint32_t flags, uint8_t id = 0) {
  nlattr* nest = nla_nest_start(m, attr);
  if (!nest) return DP_ERROR("building an MPTCP path manager request failed (no room)");
  int err = nla_put_u16(m, MPTCP_PM_ADDR_ATTR_FAMILY, static_cast<uint16_t>(a.family));
  if (!err && a.family == AF_INET) err = nla_put(m, MPTCP_PM_ADDR_ATTR_ADDR4, 4, a.bytes.data());
  if (!err && a.family == AF_INET6) err = nla_put(m, MPTCP_PM_ADDR_ATTR_ADDR6, 16, a.bytes.data());
  if (!err && port) err = nla_put_u16(m, MPTCP_PM_ADDR_ATTR_PORT, port);
  if (!err && id) err = nla_put_u8(m, MPTCP_PM_ADDR_ATTR_ID, id);
  if (!err && ifindex) err = nla_put_s32(m, MPTCP_PM_ADDR_ATTR_IF_IDX, ifindex);
  if (!err && flags) err = nla_put_u32(m, MPTCP_PM_ADDR_ATTR_FLAGS, flags);
  if (err) return DP_ERROR("building an MPTCP path manager request failed: {}", nl_geterror(err));
  nla_nest_end(m, nest);
  return {};
}

IpAddr addr_attr(nlattr* a4, nlattr* a6) {
  IpAddr a;
  if (a4 && nla_len(a4) >= 4) {
    a.family = AF_INET;
    std::memcpy(a.bytes.data(), nla_data(a4), 4);
  } else if (a6 && nla_len(a6) >= 16) {
    a.family = AF_INET6;
    std::memcpy(a.bytes.data(), nla_data(a6), 16);
  }
  return a;
}

uint16_t port_attr(nlattr* a) { return a ? ntohs(nla_get_u16(a)) : 0; }

struct Reader {
  const std::function<void(const Event&)>* on;
  size_t n = 0;
};

int on_event(nl_msg* msg, void* arg) {
  auto* r = static_cast<Reader*>(arg);
  nlattr* tb[MPTCP_ATTR_MAX + 1] = {};
  genlmsghdr* g = genlmsg_hdr(nlmsg_hdr(msg));
  if (genlmsg_parse(nlmsg_hdr(msg), 0, tb, MPTCP_ATTR_MAX, nullptr) != 0) return NL_SKIP;
  Event e;
  switch (g->cmd) {
    case MPTCP_EVENT_CREATED:
    case MPTCP_EVENT_ESTABLISHED:
    case MPTCP_EVENT_CLOSED:
    case MPTCP_EVENT_ANNOUNCED:
    case MPTCP_EVENT_REMOVED:
    case MPTCP_EVENT_SUB_ESTABLISHED:
    case MPTCP_EVENT_SUB_CLOSED:
    case MPTCP_EVENT_SUB_PRIORITY:
      e.type = static_cast<EventType>(g->cmd);
      break;
    default:
      return NL_SKIP;
  }
  if (tb[MPTCP_ATTR_TOKEN]) e.token = nla_get_u32(tb[MPTCP_ATTR_TOKEN]);
  e.flow.local = addr_attr(tb[MPTCP_ATTR_SADDR4], tb[MPTCP_ATTR_SADDR6]);
  e.flow.remote = addr_attr(tb[MPTCP_ATTR_DADDR4], tb[MPTCP_ATTR_DADDR6]);
  e.flow.lport = port_attr(tb[MPTCP_ATTR_SPORT]);
  e.flow.rport = port_attr(tb[MPTCP_ATTR_DPORT]);
  if (tb[MPTCP_ATTR_IF_IDX]) e.ifindex = nla_get_s32(tb[MPTCP_ATTR_IF_IDX]);
  if (tb[MPTCP_ATTR_BACKUP]) e.backup = nla_get_u8(tb[MPTCP_ATTR_BACKUP]) != 0;
  if (tb[MPTCP_ATTR_ERROR]) e.error = nla_get_u8(tb[MPTCP_ATTR_ERROR]);
  e.server_side =
      (tb[MPTCP_ATTR_SERVER_SIDE] && nla_get_u8(tb[MPTCP_ATTR_SERVER_SIDE])) ||
      (tb[MPTCP_ATTR_FLAGS] && (nla_get_u16(tb[MPTCP_ATTR_FLAGS]) & kEventFlagServerSide));
  ++r->n;
  (*r->on)(e);
  return NL_OK;
}

}  // namespace

Result<std::unique_ptr<PathManager>> PathManager::open() {
  std::unique_ptr<PathManager> pm(new PathManager());
  auto cmd = NlSocket::connect_genl(), events = NlSocket::connect_genl();
  if (!cmd) return cmd.error();
  if (!events) return events.error();
  pm->cmd_ = std::move(*cmd);
  pm->events_ = std::move(*events);
  int err = 0;
  pm->family_ = genl_ctrl_resolve(pm->cmd_.get(), MPTCP_PM_NAME);
  if (pm->family_ < 0)
    return DP_ERROR(
        "the kernel has no MPTCP path manager interface ({}: {}); multipath classes need "
        "CONFIG_MPTCP and Linux 5.19 or later",
        MPTCP_PM_NAME, nl_geterror(pm->family_));
  int grp = genl_ctrl_resolve_grp(pm->cmd_.get(), MPTCP_PM_NAME, MPTCP_PM_EV_GRP_NAME);
  if (grp < 0) return DP_ERROR("the MPTCP path manager has no events group: {}", nl_geterror(grp));
  nl_socket_disable_seq_check(pm->events_.get());
  if ((err = nl_socket_add_membership(pm->events_.get(), grp)) != 0)
    return DP_ERROR("joining the MPTCP events group failed (needs CAP_NET_ADMIN): {}",
                    nl_geterror(err));
  if ((err = nl_socket_set_nonblocking(pm->events_.get())) != 0)
    return DP_ERROR("making the MPTCP events socket non-blocking failed: {}", nl_geterror(err));
  // a burst of connections must not overflow the events socket
  (void)nl_socket_set_buffer_size(pm->events_.get(), 4 << 20, 0);
  return pm;
}

int PathManager::event_fd() const { return events_.fd(); }

Result<size_t> PathManager::read_events(const std::function<void(const Event&)>& on) {
  Reader r{&on};
  // the socket's own callbacks, which skip the sequence check (events are
  // not answers to requests), with ours for the messages
  nl_cb* sock_cb = nl_socket_get_cb(events_.get());
  nl_cb* cb = sock_cb ? nl_cb_clone(sock_cb) : nullptr;
  if (sock_cb) nl_cb_put(sock_cb);
  if (!cb) return DP_ERROR("allocating a netlink callback failed");
  nl_cb_set(cb, NL_CB_VALID, NL_CB_CUSTOM, on_event, &r);
  int err = 0;
  for (;;) {
    err = nl_recvmsgs(events_.get(), cb);
    if (err < 0) break;
  }
  nl_cb_put(cb);
  if (err == -NLE_AGAIN) return r.n;
  // an overrun loses events: the caller reconciles from what it knows
  if (err == -NLE_NOMEM || err == -NLE_DUMP_INTR)
    return DP_ERROR("MPTCP events were lost (the socket overran): {}", nl_geterror(err));
  return DP_ERROR("reading MPTCP events failed: {}", nl_geterror(err));
}

Result<void> PathManager::command(uint8_t cmd, const std::function<Result<void>(nl_msg*)>& fill,
                                  const std::string& what) {
  nl_msg* m = nlmsg_alloc();
  if (!m) return DP_ERROR("allocating a netlink message failed");
  if (!genlmsg_put(m, NL_AUTO_PORT, NL_AUTO_SEQ, family_, 0, 0, cmd, MPTCP_PM_VER)) {
    nlmsg_free(m);
    return DP_ERROR("building an MPTCP path manager request failed");
  }
  if (auto r = fill(m); !r) {
    nlmsg_free(m);
    return r.error();
  }
  int err = nl_send_sync(cmd_.get(), m);  // frees m
  if (err < 0) return DP_ERROR("{} failed: {}", what, nl_geterror(err));
  return {};
}

Result<void> PathManager::create(uint32_t token, const IpAddr& local, uint16_t lport, uint8_t id,
                                 int ifindex, bool backup, const IpAddr& remote, uint16_t rport) {
  return command(
      MPTCP_PM_CMD_SUBFLOW_CREATE,
      [&](nl_msg* m) -> Result<void> {
        if (nla_put_u32(m, MPTCP_PM_ATTR_TOKEN, token) != 0)
          return DP_ERROR("building an MPTCP request failed");
        DP_TRY(put_addr(m, MPTCP_PM_ATTR_ADDR, local, lport, ifindex,
                        backup ? MPTCP_PM_ADDR_FLAG_BACKUP : 0, id));
        return put_addr(m, MPTCP_PM_ATTR_ADDR_REMOTE, remote, rport, 0, 0);
      },
      fmt::format("creating a subflow {}:{} -> {}:{} of MPTCP connection {:#x}", local.str(), lport,
                  remote.str(), rport, token));
}

Result<void> PathManager::destroy(uint32_t token, const Subflow& s) {
  return command(
      MPTCP_PM_CMD_SUBFLOW_DESTROY,
      [&](nl_msg* m) -> Result<void> {
        if (nla_put_u32(m, MPTCP_PM_ATTR_TOKEN, token) != 0)
          return DP_ERROR("building an MPTCP request failed");
        DP_TRY(put_addr(m, MPTCP_PM_ATTR_ADDR, s.local, s.lport, 0, 0));
        return put_addr(m, MPTCP_PM_ATTR_ADDR_REMOTE, s.remote, s.rport, 0, 0);
      },
      fmt::format("removing subflow {}:{} -> {}:{} of MPTCP connection {:#x}", s.local.str(),
                  s.lport, s.remote.str(), s.rport, token));
}

Result<void> PathManager::set_backup(uint32_t token, const Subflow& s, bool backup) {
  return command(
      MPTCP_PM_CMD_SET_FLAGS,
      [&](nl_msg* m) -> Result<void> {
        if (nla_put_u32(m, MPTCP_PM_ATTR_TOKEN, token) != 0)
          return DP_ERROR("building an MPTCP request failed");
        DP_TRY(put_addr(m, MPTCP_PM_ATTR_ADDR, s.local, s.lport, 0,
                        backup ? MPTCP_PM_ADDR_FLAG_BACKUP : 0));
        return put_addr(m, MPTCP_PM_ATTR_ADDR_REMOTE, s.remote, s.rport, 0, 0);
      },
      fmt::format("marking subflow {}:{} -> {}:{} of MPTCP connection {:#x} {}", s.local.str(),
                  s.lport, s.remote.str(), s.rport, token, backup ? "backup" : "active"));
}

}  // namespace dp::mptcp

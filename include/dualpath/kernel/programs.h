// SPDX-License-Identifier: Apache-2.0
// Every program of the datapath (bpf/dp_*.bpf.c): where it attaches, and the
// pin that holds its attachment under the node's pin directory. One table,
// which every part that handles programs walks:
//   - DpSkeleton::load refuses an object whose programs and this table
//     differ, so a new SEC() without its line here fails the BPF tests;
//   - Datapath::attach attaches each, and pins it;
//   - Datapath::cleanup detaches each (dualpathd --cleanup, package removal);
//   - the layout upgrade removes the pins of programs an earlier build had
//     and this one has not.
#pragma once

#include <string>
#include <string_view>

namespace dp {

enum class Hook {
  TcEgress,   // clsact egress of every rail (Tc::attach), with the pin of the program
  TcIngress,  // clsact ingress of every rail
  Cgroup,     // the policy's cgroup (sockops, sock_addr, sock_release): a pinned link
  Netns,      // the daemon's network namespace (sk_lookup): a pinned link
  Trace,      // a kernel function (fmod_ret): a pinned link
  Iter,       // an iterator the daemon runs (iter/udp, iter/tcp): a pinned link
};

enum class When {
  Always,
  Multipath,  // only while the policy has a multipath class: it runs on every socket()
};

struct ProgramSpec {
  std::string_view name;  // the program's (its SEC function's) name, as bpftool shows it
  Hook hook;
  std::string_view pin;  // prog_<pin> (tc) or link_<pin> (links) in the pin directory
  When when = When::Always;
  // An optional program (a kernel hook that not every kernel has) is not
  // loaded where the kernel refuses it; the rest of the datapath still is.
  bool optional = false;
};

inline constexpr ProgramSpec kPrograms[] = {
    {"dp_egress", Hook::TcEgress, "egress"},
    {"dp_ingress", Hook::TcIngress, "ingress"},
    {"dp_sockops", Hook::Cgroup, "sockops"},
    {"dp_connect4", Hook::Cgroup, "connect4"},
    {"dp_connect6", Hook::Cgroup, "connect6"},
    {"dp_sendmsg4", Hook::Cgroup, "sendmsg4"},
    {"dp_sendmsg6", Hook::Cgroup, "sendmsg6"},
    {"dp_getpeername4", Hook::Cgroup, "getpeername4"},
    {"dp_getpeername6", Hook::Cgroup, "getpeername6"},
    {"dp_recvmsg4", Hook::Cgroup, "recvmsg4"},
    {"dp_recvmsg6", Hook::Cgroup, "recvmsg6"},
    {"dp_getsockname4", Hook::Cgroup, "getsockname4"},
    {"dp_getsockname6", Hook::Cgroup, "getsockname6"},
    {"dp_sock_release", Hook::Cgroup, "sock_release"},
    {"dp_post_bind4", Hook::Cgroup, "post_bind4"},
    {"dp_post_bind6", Hook::Cgroup, "post_bind6"},
    {"dp_sk_lookup", Hook::Netns, "sk_lookup"},
    {"dp_udp_servers", Hook::Iter, "udp_servers"},
    {"dp_tcp_listeners", Hook::Iter, "tcp_listeners"},
    {"dp_update_socket_protocol", Hook::Trace, "update_socket_protocol", When::Multipath, true},
};

// The file name of a program's pin: prog_<pin> for tc programs, else link_<pin>.
std::string pin_name(const ProgramSpec& p);
// The table's entry for a program name, or null.
const ProgramSpec* program_spec(std::string_view name);
inline bool is_tc(const ProgramSpec& p) {
  return p.hook == Hook::TcEgress || p.hook == Hook::TcIngress;
}

}  // namespace dp

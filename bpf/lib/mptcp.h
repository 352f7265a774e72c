/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Multipath classes: a TCP socket created by a task whose cgroup is a
 * multipath class's (abi.h, DP_CLASS_TCP_F_MULTIPATH) is made an MPTCP socket
 * instead, with no change to the application. The kernel's hook for this is
 * update_socket_protocol (fmod_ret, Linux 6.6; its selftest is
 * progs/mptcpify.c). At socket() no port is known, so only the cgroup can
 * name the class. The daemon then makes a subflow per rail over the
 * userspace path manager (daemon/kernel/mptcp_pm.cpp). A peer without MPTCP
 * answers the handshake as plain TCP and the connection falls back to it. */
#ifndef DP_BPF_MPTCP_H
#define DP_BPF_MPTCP_H

#include <linux/bpf.h>
#include <linux/in.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "maps.h"
#include "steer.h"

#define DP_SOCK_STREAM 1
#define DP_SOCK_TYPE_MASK 0xf
#define DP_IPPROTO_MPTCP 262

/* The kernel types this reads, by name (CO-RE relocates the offsets). The
 * network namespace's cookie, which SO_NETNS_COOKIE reports, is
 * net->net_cookie before Linux 6.18 and net->ns.ns_id from then on. */
struct ns_common___dp {
	__u64 ns_id;
} __attribute__((preserve_access_index));

struct net___dp {
	__u64 net_cookie;
	struct ns_common___dp ns;
} __attribute__((preserve_access_index));

struct nsproxy___dp {
	struct net___dp *net_ns;
} __attribute__((preserve_access_index));

struct task_struct___dp {
	struct nsproxy___dp *nsproxy;
} __attribute__((preserve_access_index));

static __always_inline __u64 dp_current_netns_cookie(void)
{
	struct task_struct___dp *task = (struct task_struct___dp *)bpf_get_current_task();
	struct net___dp *net = BPF_CORE_READ(task, nsproxy, net_ns);

	if (!net)
		return 0;
	if (bpf_core_field_exists(net->net_cookie))
		return BPF_CORE_READ(net, net_cookie);
	return BPF_CORE_READ(net, ns.ns_id);
}

/* update_socket_protocol(family, type, protocol): the protocol to create. */
static __always_inline int dp_mptcpify(int family, int type, int protocol)
{
	struct dp_class_tcp *ct;
	struct dp_config *cfg;
	__u32 zero = 0, *gens, key;
	__u8 cls;

	if ((family != DP_AF_INET && family != DP_AF_INET6) ||
	    (type & DP_SOCK_TYPE_MASK) != DP_SOCK_STREAM ||
	    (protocol != 0 && protocol != IPPROTO_TCP))
		return protocol;
	cfg = bpf_map_lookup_elem(&dp_config, &zero);
	if (!cfg)
		return protocol;
	/* every daemon's program sees every socket(): only this one's namespace */
	if (cfg->netns_cookie && dp_current_netns_cookie() != cfg->netns_cookie)
		return protocol;
	gens = bpf_map_lookup_elem(&dp_cgroup_gens, &zero);
	if (!gens || !(*gens & (1u << (cfg->active_gen & 1))))
		return protocol;
	cls = dp_cgroup_class(0, DP_CGROUP_CURRENT, cfg->active_gen & 1);
	if (cls >= DP_MAX_CLASSES)
		return protocol;
	key = cls;
	ct = bpf_map_lookup_elem(&dp_class_tcp, &key);
	if (!ct || !(ct->flags & DP_CLASS_TCP_F_MULTIPATH))
		return protocol;
	return DP_IPPROTO_MPTCP;
}

#endif /* DP_BPF_MPTCP_H */

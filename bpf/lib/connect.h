/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Connect-time placement for the separate topology (abi.h, struct
 * dp_rail_net): a classified connection toward a peer's address on one rail
 * is placed on the rail its class's decision picks by rewriting the
 * destination to the same host on that rail's network. Cilium's socket-level
 * load balancing (bpf/bpf_sock.c) does the same for services.
 *
 * A peer in the policy's peer table (abi.h, struct dp_peer) is moved to its
 * address on the target rail as the table gives it, whatever its host part.
 *
 * Fail-open: a destination no rail's network holds, a host part that does not
 * fit the chosen rail's network, or any missing map entry leaves the address
 * as the application gave it. */
#ifndef DP_BPF_CONNECT_H
#define DP_BPF_CONNECT_H

#include <linux/bpf.h>
#include <linux/in.h>

#include "maps.h"
#include "steer.h"

static __always_inline void dp_count_connect(__u32 rail, __u32 cls)
{
	__u32 key = rail * DP_MAX_CLASSES + (cls & (DP_MAX_CLASSES - 1));
	__u64 *v = bpf_map_lookup_elem(&dp_connects, &key);

	if (v)
		*v += 1;
}

/* The rail whose network holds addr (4 words, IPv4 in addr[0]). */
static __always_inline __u32 dp_rail_of_addr(const __u32 *addr, __u16 family, int *any_net)
{
#pragma unroll
	for (__u32 r = 0; r < DP_MAX_RAILS; r++) {
		__u32 key = r;
		struct dp_rail_net *n = bpf_map_lookup_elem(&dp_rail_nets, &key);

		if (!n)
			continue;
		if (family == DP_AF_INET) {
			if (!n->mask4)
				continue;
			*any_net = 1;
			if ((addr[0] & n->mask4) == n->net4)
				return r;
		} else {
			if (!(n->mask6[0] | n->mask6[1] | n->mask6[2] | n->mask6[3]))
				continue;
			*any_net = 1;
			if ((addr[0] & n->mask6[0]) == n->net6[0] &&
			    (addr[1] & n->mask6[1]) == n->net6[1] &&
			    (addr[2] & n->mask6[2]) == n->net6[2] &&
			    (addr[3] & n->mask6[3]) == n->net6[3])
				return r;
		}
	}
	return DP_RAIL_NONE;
}

/* addr moved from rail `from`'s network to rail `to`'s, keeping the host
 * part. Returns 0 when it does not fit (addr is then unchanged). */
static __always_inline int dp_map_host(__u32 *addr, __u16 family, __u32 from, __u32 to)
{
	struct dp_rail_net *f = bpf_map_lookup_elem(&dp_rail_nets, &from);
	struct dp_rail_net *t = bpf_map_lookup_elem(&dp_rail_nets, &to);
	__u32 out[4] = {};

	if (!f || !t)
		return 0;
	if (family == DP_AF_INET) {
		__u32 host = addr[0] & ~f->mask4;

		if (!t->mask4 || (host & t->mask4))
			return 0;
		addr[0] = t->net4 | host;
		return 1;
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u32 host = addr[i] & ~f->mask6[i];

		if (host & t->mask6[i])
			return 0;
		out[i] = t->net6[i] | host;
	}
	if (!(t->mask6[0] | t->mask6[1] | t->mask6[2] | t->mask6[3]))
		return 0;
#pragma unroll
	for (int i = 0; i < 4; i++)
		addr[i] = out[i];
	return 1;
}

/* The policy's peer table entry of addr, if it has one. */
static __always_inline struct dp_peer *dp_peer_of(const __u32 *addr, __u16 family)
{
	struct dp_peer_key k = {};

	k.family = family;
	k.addr[0] = addr[0];
	if (family == DP_AF_INET6) {
		k.addr[1] = addr[1];
		k.addr[2] = addr[2];
		k.addr[3] = addr[3];
	}
	return bpf_map_lookup_elem(&dp_peers, &k);
}

/* addr moved from rail `from`'s network to rail `to`'s: the peer's address
 * there from the peer table, or else the same host part. Returns 0 when it
 * does not fit (addr is then unchanged). */
static __always_inline int dp_map_addr(__u32 *addr, __u16 family, __u32 from, __u32 to)
{
	struct dp_peer *peer = dp_peer_of(addr, family);

	if (peer) {
		if (to >= DP_MAX_RAILS || !peer->has[to])
			return 0;
		addr[0] = peer->addr[to][0];
		if (family == DP_AF_INET6) {
			addr[1] = peer->addr[to][1];
			addr[2] = peer->addr[to][2];
			addr[3] = peer->addr[to][3];
		}
		return 1;
	}
	return dp_map_host(addr, family, from, to);
}

static __always_inline void dp_load_addr(struct bpf_sock_addr *ctx, __u16 family, __u32 *addr)
{
	if (family == DP_AF_INET) {
		addr[0] = ctx->user_ip4;
	} else {
		addr[0] = ctx->user_ip6[0];
		addr[1] = ctx->user_ip6[1];
		addr[2] = ctx->user_ip6[2];
		addr[3] = ctx->user_ip6[3];
	}
}

static __always_inline void dp_store_addr(struct bpf_sock_addr *ctx, __u16 family,
					  const __u32 *addr)
{
	if (family == DP_AF_INET) {
		ctx->user_ip4 = addr[0];
	} else {
		ctx->user_ip6[0] = addr[0];
		ctx->user_ip6[1] = addr[1];
		ctx->user_ip6[2] = addr[2];
		ctx->user_ip6[3] = addr[3];
	}
}

/* An IPv4-mapped IPv6 address (::ffff:a.b.c.d, what a dual-stack socket
 * gives for an IPv4 peer: Java's sockets, torch's TCPStore) made the IPv4
 * address it stands for, in place. Returns the address's family now. */
static __always_inline __u16 dp_unmapped(__u16 family, __u32 *addr)
{
	if (family == DP_AF_INET6 && addr[0] == 0 && addr[1] == 0 && addr[2] == bpf_htonl(0xffff)) {
		addr[0] = addr[3];
		addr[1] = addr[2] = addr[3] = 0;
		return DP_AF_INET;
	}
	return family;
}

/* The address a sock_addr hook was given (in the hook's family), as
 * placement sees it (dp_unmapped); returns the family it is placed in. */
static __always_inline __u16 dp_load_placed(struct bpf_sock_addr *ctx, __u16 family, __u32 *addr)
{
	dp_load_addr(ctx, family, addr);
	return dp_unmapped(family, addr);
}

/* addr, placed in family `as`, given back in the hook's family (mapped
 * again for a dual-stack socket). */
static __always_inline void dp_store_placed(struct bpf_sock_addr *ctx, __u16 family, __u16 as,
					    const __u32 *addr)
{
	if (family == DP_AF_INET6 && as == DP_AF_INET) {
		__u32 mapped[4] = {0, 0, bpf_htonl(0xffff), addr[0]};

		dp_store_addr(ctx, family, mapped);
		return;
	}
	dp_store_addr(ctx, family, addr);
}

/* The rail slot whose local address is addr (IPv4 in addr[0]). */
static __always_inline __u32 dp_local_rail(const __u32 *addr, __u16 family)
{
#pragma unroll
	for (__u32 r = 0; r < DP_MAX_RAILS; r++) {
		__u32 key = r;
		struct dp_local_addr *a = bpf_map_lookup_elem(&dp_local_addrs, &key);

		if (!a)
			continue;
		if (family == DP_AF_INET) {
			if (a->addr4 && a->addr4 == addr[0])
				return r;
		} else if ((a->addr6[0] | a->addr6[1] | a->addr6[2] | a->addr6[3]) &&
			   a->addr6[0] == addr[0] && a->addr6[1] == addr[1] &&
			   a->addr6[2] == addr[2] && a->addr6[3] == addr[3]) {
			return r;
		}
	}
	return DP_RAIL_NONE;
}

/* The rail whose address on this node the socket was bound to before it
 * connected (its source chosen: Open MPI's TCP transport binds so), or
 * DP_RAIL_NONE: not bound to an address, or to no rail's. */
static __always_inline __u32 dp_bound_rail(const struct bpf_sock *sk)
{
	__u32 src[4] = {};

	if (sk->family == DP_AF_INET) {
		src[0] = sk->src_ip4;
		return src[0] ? dp_local_rail(src, DP_AF_INET) : DP_RAIL_NONE;
	}
	src[0] = sk->src_ip6[0];
	src[1] = sk->src_ip6[1];
	src[2] = sk->src_ip6[2];
	src[3] = sk->src_ip6[3];
	if (!(src[0] | src[1] | src[2] | src[3]))
		return DP_RAIL_NONE;
	return dp_local_rail(src, dp_unmapped(DP_AF_INET6, src));
}

/* Only this daemon's namespace: every daemon's programs sit on the cgroup. */
static __always_inline struct dp_config *dp_connect_config(struct bpf_sock_addr *ctx)
{
	__u32 zero = 0;
	struct dp_config *cfg = bpf_map_lookup_elem(&dp_config, &zero);

	if (!cfg)
		return 0;
	if (cfg->netns_cookie && bpf_get_netns_cookie(ctx) != cfg->netns_cookie)
		return 0;
	return cfg;
}

/* connect() and unconnected sendmsg(): place the connection. */
static __always_inline int dp_connect(struct bpf_sock_addr *ctx, __u16 family)
{
	struct dp_config *cfg = dp_connect_config(ctx);
	struct dp_sock_place *slot;
	struct dp_sock_orig *st;
	struct dp_decision *d;
	struct dp_pkt pkt = {};
	struct bpf_sock *sk;
	__u32 addr[4] = {}, here, target, idx, mark = 0;
	__u64 cookie;
	int any_net = 0;
	__u16 as;
	__u8 cls, rule;

	if (!cfg)
		return 1;
	if (ctx->protocol != IPPROTO_TCP && ctx->protocol != IPPROTO_UDP)
		return 1;
	as = dp_load_placed(ctx, family, addr);
	here = dp_rail_of_addr(addr, as, &any_net);
	if (here == DP_RAIL_NONE) {
		/* a peer the policy's table holds, outside every rail's network */
		struct dp_peer *pe = dp_peer_of(addr, as);

		if (pe && pe->rail < DP_MAX_RAILS) {
			here = pe->rail;
			any_net = 1;
		}
	}
	if (!any_net)
		return 1; /* the shared topology: nothing to place at connect time */
	sk = ctx->sk;
	/* a socket bound to a device keeps its destination: the application
	 * chose the rail, and a multipath subflow is made on its rail by the
	 * daemon (lib/mptcp.h) */
	if (sk && sk->bound_dev_if)
		return 1;
	if (sk)
		mark = sk->mark;
	pkt.key.proto = (__u8)ctx->protocol;
	pkt.key.dport = (__u16)ctx->user_port;
	{
		__u32 mask, redirect;

		dp_mark_cfg(&mask, &redirect);
		mark &= mask & ~redirect;
	}
	cls = dp_classify_rule(&pkt, mark, cfg, &rule, ctx, DP_CGROUP_CURRENT);
	if (cls >= DP_MAX_CLASSES)
		return 1;
	if (here == DP_RAIL_NONE) {
		dp_count_connect(DP_CONNECT_UNMAPPED, cls);
		return 1;
	}
	/* an MPTCP connection's first subflow goes where the application asked
	 * while that rail works: the daemon adds a subflow on every other rail,
	 * and the class's decision gives them their roles (lib/mptcp.h) */
	if (ctx->protocol == IPPROTO_TCP && sk && bpf_skc_to_mptcp_sock(sk) &&
	    dp_rail_usable_for(here, DP_RAIL_F_CONNECT)) {
		dp_count_connect(here, cls);
		return 1;
	}
	idx = cls;
	d = bpf_map_lookup_elem(&dp_decisions, &idx);
	if (!d)
		return 1;
	target = dp_place_by(d, bpf_get_prandom_u32(), DP_RAIL_F_CONNECT);
	if (target == DP_RAIL_NONE || target == here) {
		dp_count_connect(here, cls);
		return 1;
	}
	/* a socket bound to another rail's address keeps its destination: its
	 * packets carry that address as their source, which the target rail's
	 * network would not route (and a router's reverse-path filter drops) */
	if (sk) {
		__u32 bound = dp_bound_rail(sk);

		if (bound != DP_RAIL_NONE && bound != target) {
			dp_count_connect(here, cls);
			return 1;
		}
	}
	__u32 orig[4] = {addr[0], addr[1], addr[2], addr[3]};

	if (!dp_map_addr(addr, as, here, target)) {
		dp_count_connect(DP_CONNECT_UNMAPPED, cls);
		return 1;
	}
	cookie = bpf_get_socket_cookie(ctx);
	st = bpf_map_lookup_elem(&dp_sock_orig, &cookie);
	if (!st) {
		struct dp_sock_orig fresh = {};

		if (bpf_map_update_elem(&dp_sock_orig, &cookie, &fresh, BPF_NOEXIST) != 0 ||
		    !(st = bpf_map_lookup_elem(&dp_sock_orig, &cookie))) {
			/* table full: nowhere to remember it, so leave it alone */
			dp_count_connect(DP_CONNECT_UNMAPPED, cls);
			return 1;
		}
	}
	slot = &st->p[st->next & (DP_SOCK_PLACES - 1)];
	st->next += 1;
	__builtin_memcpy(slot->placed, addr, sizeof(slot->placed));
	__builtin_memcpy(slot->orig, orig, sizeof(slot->orig));
	slot->port = (__u16)ctx->user_port;
	slot->family = as;
	dp_store_placed(ctx, family, as, addr);
	dp_count_connect(target, cls);
	return 1;
}

/* getpeername(), getsockname() and recvmsg(): the address the application
 * asked for. Returns 0 when the socket was never placed. (The caller checked
 * dp_connect_config.) */
static __always_inline int dp_restore_placed(struct bpf_sock_addr *ctx, __u16 family)
{
	struct dp_sock_orig *st;
	__u32 addr[4] = {};
	__u64 cookie;
	__u16 port, as;

	cookie = bpf_get_socket_cookie(ctx);
	st = bpf_map_lookup_elem(&dp_sock_orig, &cookie);
	if (!st)
		return 0;
	as = dp_load_placed(ctx, family, addr);
	port = (__u16)ctx->user_port;
#pragma unroll
	for (int i = 0; i < DP_SOCK_PLACES; i++) {
		struct dp_sock_place *p = &st->p[i];

		if (p->family != as || p->port != port || p->placed[0] != addr[0] ||
		    p->placed[1] != addr[1] || p->placed[2] != addr[2] || p->placed[3] != addr[3])
			continue;
		dp_store_placed(ctx, family, as, p->orig);
		return 1;
	}
	return 1;
}

static __always_inline int dp_restore(struct bpf_sock_addr *ctx, __u16 family)
{
	if (dp_connect_config(ctx))
		dp_restore_placed(ctx, family);
	return 1;
}

/* A socket closes: forget what it was placed on. */
static __always_inline int dp_sock_forget(struct bpf_sock *sk)
{
	__u32 zero = 0;
	struct dp_config *cfg = bpf_map_lookup_elem(&dp_config, &zero);
	__u64 cookie;

	if (!cfg || (cfg->netns_cookie && bpf_get_netns_cookie(sk) != cfg->netns_cookie))
		return 1;
	cookie = bpf_get_socket_cookie(sk);
	bpf_map_delete_elem(&dp_sock_orig, &cookie);
	return 1;
}

#endif /* DP_BPF_CONNECT_H */

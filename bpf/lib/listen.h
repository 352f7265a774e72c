/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Servers bound to one rail's address (abi.h, dp_listen_key): the receiving
 * side of connect-time placement in the separate topology.
 *
 * A framework's server listens on this node's address on the rail it was
 * given. A peer's connect-time placement may send a connection to this
 * node's address on another rail, where nothing listens. The sk_lookup
 * program then hands the SYN to the listener that holds the same port on this
 * node's address on another rail (bpf_sk_assign), and only then: a listener
 * bound to the address asked for, or an established socket, is never
 * overridden (the kernel runs sk_lookup after its established lookup, and
 * the program passes whenever dp_listeners holds the exact address).
 *
 * The accepted socket's addresses are what the application would have seen
 * without placement: sockops notes the handover (dp_handed, from sk_lookup)
 * when the connection is established and records both addresses in
 * dp_sock_orig, which getsockname() and getpeername() read back
 * (lib/connect.h, dp_restore).
 *
 * Fail-open: a missing map entry, a full table or a refused assignment
 * leaves the lookup to the kernel, as if dualpath were not there. */
#ifndef DP_BPF_LISTEN_H
#define DP_BPF_LISTEN_H

#include <linux/bpf.h>
#include <linux/in.h>

#include "connect.h"
#include "ctx.h"
#include "maps.h"

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

/* key.addr = this node's address on rail r; 0 when it has none. */
static __always_inline int dp_local_addr_of(__u32 r, __u16 family, __u32 *addr)
{
	struct dp_local_addr *a = bpf_map_lookup_elem(&dp_local_addrs, &r);

	if (!a)
		return 0;
	if (family == DP_AF_INET) {
		addr[0] = a->addr4;
		addr[1] = addr[2] = addr[3] = 0;
		return a->addr4 != 0;
	}
	addr[0] = a->addr6[0];
	addr[1] = a->addr6[1];
	addr[2] = a->addr6[2];
	addr[3] = a->addr6[3];
	return (addr[0] | addr[1] | addr[2] | addr[3]) != 0;
}

/* The family and address of a flow key's local side (IPv4 in addr[0]). */
static __always_inline __u16 dp_local_of(const struct dp_flow_key *k, __u32 *addr)
{
	if (k->saddr[0] == 0 && k->saddr[1] == 0 && k->saddr[2] == bpf_htonl(0xffff)) {
		addr[0] = k->saddr[3];
		return DP_AF_INET;
	}
	__builtin_memcpy(addr, k->saddr, 4 * sizeof(__u32));
	return DP_AF_INET6;
}

/* sockops, BPF_SOCK_OPS_TCP_LISTEN_CB (k: dp_sock_key of the listener): a
 * listener bound to one of this node's rail addresses is remembered. A
 * wildcard listener takes every address already and needs nothing. */
static __always_inline void dp_listen_note(struct bpf_sock_ops *skops, const struct dp_flow_key *k)
{
	struct dp_listen_key key = {.proto = IPPROTO_TCP};
	__u16 family = dp_local_of(k, key.addr);

	if (dp_local_rail(key.addr, family) == DP_RAIL_NONE)
		return;
	key.family = (__u8)family;
	key.port = bpf_ntohs(k->sport);
	bpf_sock_hash_update(skops, &dp_listeners, &key, BPF_ANY);
}

/* Whether dp_listeners holds key (a listener is bound there). */
static __always_inline int dp_listening(struct dp_listen_key *key)
{
	struct bpf_sock *sk = bpf_map_lookup_elem(&dp_listeners, key);

	if (!sk)
		return 0;
	bpf_sk_release(sk);
	return 1;
}

/* sk_lookup: a connection to this node's address on one rail, with no
 * listener there, goes to the listener on the same port on another rail. */
static __always_inline int dp_handover(struct bpf_sk_lookup *ctx)
{
	struct dp_listen_key key = {};
	struct dp_flow_key seen = {};
	__u32 family, proto, lport, here, to, v;
	__u32 local[4] = {}, remote[4] = {};
	struct bpf_sock *sk;

	DP_CTX_LOAD(proto, ctx->protocol);
	if (proto != IPPROTO_TCP)
		return SK_PASS;
	DP_CTX_LOAD(family, ctx->family);
	if (family == DP_AF_INET) {
		DP_CTX_LOAD(v, ctx->local_ip4);
		local[0] = v;
		DP_CTX_LOAD(v, ctx->remote_ip4);
		remote[0] = v;
	} else if (family == DP_AF_INET6) {
		DP_CTX_LOAD_IP6(local, ctx->local_ip6);
		DP_CTX_LOAD_IP6(remote, ctx->remote_ip6);
	} else {
		return SK_PASS;
	}
	here = dp_local_rail(local, (__u16)family);
	if (here == DP_RAIL_NONE)
		return SK_PASS;
	DP_CTX_LOAD(lport, ctx->local_port);
	__builtin_memcpy(key.addr, local, sizeof(key.addr));
	key.family = (__u8)family;
	key.proto = IPPROTO_TCP;
	key.port = (__u16)lport;
	if (dp_listening(&key))
		return SK_PASS; /* bound to the address asked for: the kernel finds it */
	for (to = 0; to < DP_MAX_RAILS; to++) {
		if (to == here || !dp_local_addr_of(to, (__u16)family, key.addr))
			continue;
		sk = bpf_map_lookup_elem(&dp_listeners, &key);
		if (!sk)
			continue;
		if (bpf_sk_assign(ctx, sk, 0) != 0) {
			bpf_sk_release(sk);
			return SK_PASS;
		}
		bpf_sk_release(sk);
		break;
	}
	if (to >= DP_MAX_RAILS)
		return SK_PASS;
	/* what sockops will see for the accepted socket (dp_sock_key) */
	if (family == DP_AF_INET) {
		seen.saddr[2] = bpf_htonl(0xffff);
		seen.saddr[3] = local[0];
		seen.daddr[2] = bpf_htonl(0xffff);
		seen.daddr[3] = remote[0];
	} else {
		__builtin_memcpy(seen.saddr, local, sizeof(seen.saddr));
		__builtin_memcpy(seen.daddr, remote, sizeof(seen.daddr));
	}
	DP_CTX_LOAD(v, ctx->remote_port);
	seen.sport = bpf_htons((__u16)lport);
	seen.dport = (__u16)v;
	seen.proto = IPPROTO_TCP;
	bpf_map_update_elem(&dp_handed, &seen, &to, BPF_ANY);
	{
		__u64 *n = bpf_map_lookup_elem(&dp_handovers, &here);

		if (n)
			*n += 1;
	}
	return SK_PASS;
}

/* One dp_sock_orig place: shown as `orig` where the socket has `placed`. */
static __always_inline void dp_place_note(struct dp_sock_orig *st, const __u32 *placed,
					  const __u32 *orig, __u16 port, __u16 family)
{
	struct dp_sock_place *slot = &st->p[st->next & (DP_SOCK_PLACES - 1)];

	st->next += 1;
	__builtin_memcpy(slot->placed, placed, sizeof(slot->placed));
	__builtin_memcpy(slot->orig, orig, sizeof(slot->orig));
	slot->port = port;
	slot->family = family;
}

/* sockops, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB: a handed-over connection's
 * socket shows the listener's address as its own, and the peer on the
 * listener's rail (the same host part; left as it is when it does not fit). */
static __always_inline void dp_handover_accepted(struct bpf_sock_ops *skops,
						 const struct dp_flow_key *k)
{
	struct dp_sock_orig fresh = {}, *st;
	__u32 local[4] = {}, peer[4] = {}, orig[4] = {};
	__u32 *to = bpf_map_lookup_elem(&dp_handed, k);
	__u16 family;
	__u64 cookie;
	__u32 rail, from;
	int any_net = 0;

	if (!to)
		return;
	rail = *to;
	bpf_map_delete_elem(&dp_handed, k);
	family = dp_local_of(k, local);
	if (family == DP_AF_INET)
		peer[0] = k->daddr[3];
	else
		__builtin_memcpy(peer, k->daddr, sizeof(peer));
	if (rail >= DP_MAX_RAILS || !dp_local_addr_of(rail, family, orig))
		return;
	cookie = bpf_get_socket_cookie(skops);
	if (bpf_map_update_elem(&dp_sock_orig, &cookie, &fresh, BPF_NOEXIST) != 0)
		return;
	st = bpf_map_lookup_elem(&dp_sock_orig, &cookie);
	if (!st)
		return;
	dp_place_note(st, local, orig, k->sport, family);
	from = dp_rail_of_addr(peer, family, &any_net);
	__builtin_memcpy(orig, peer, sizeof(orig));
	if (from != DP_RAIL_NONE && dp_map_addr(orig, family, from, rail))
		dp_place_note(st, peer, orig, k->dport, family);
}

#endif /* DP_BPF_LISTEN_H */

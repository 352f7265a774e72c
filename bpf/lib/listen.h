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
 * listener bound to one of this node's rail addresses is remembered. (One on
 * the unspecified address takes every address already: post_bind notes it in
 * dp_bound, so that nothing is handed past it.) */
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

/* Whether a socket holds key's address and port, or the unspecified address
 * and that port: the kernel then finds it, and sk_lookup must not override
 * it. TCP listeners on a rail address are in dp_listeners (sockops), UDP
 * sockets on one and sockets of either on the unspecified address in
 * dp_bound, from their bind on (cgroup post_bind). */
static __always_inline int dp_bound_here(struct dp_listen_key *key)
{
	struct dp_listen_key any = {.port = key->port, .proto = key->proto, .family = key->family};
	/* a dual-stack [::] socket takes IPv4 too */
	struct dp_listen_key any6 = {.port = key->port, .proto = key->proto, .family = DP_AF_INET6};

	if (key->proto == IPPROTO_TCP && dp_listening(key))
		return 1;
	return bpf_map_lookup_elem(&dp_bound, key) || bpf_map_lookup_elem(&dp_bound, &any) ||
	       bpf_map_lookup_elem(&dp_bound, &any6);
}

static __always_inline void dp_count_handover(__u32 here)
{
	__u64 *n = bpf_map_lookup_elem(&dp_handovers, &here);

	if (n)
		*n += 1;
}

/* The peer `real` (a UDP datagram's source) as a server bound to this node's
 * address on rail `to` sees it: the same peer on that rail (the peer table,
 * or the same host part), or `real` where it does not map. */
static __always_inline void dp_udp_shown(const __u32 *real, __u16 family, __u32 to, __u32 *shown)
{
	__u32 from;
	int any_net = 0;

	__builtin_memcpy(shown, real, 4 * sizeof(__u32));
	from = dp_rail_of_addr(shown, family, &any_net);
	if (from != DP_RAIL_NONE && from != to)
		dp_map_addr(shown, family, from, to);
}

/* sk_lookup handed a datagram from real:rport, addressed to this node's
 * address on rail `here`, to the server bound to port lport on rail `to`:
 * remembered (once per peer, not per datagram) for the server's recvmsg()
 * and sendto() (dp_udp_restore, dp_udp_reply). */
static __always_inline void dp_udp_hand(const __u32 *real, __u16 family, __u16 lport, __u16 rport,
					__u32 here, __u32 to)
{
	struct dp_udp_peer peer = {.lport = lport, .rport = rport, .family = (__u8)family};
	struct dp_udp_handed h = {.here = here, .to = to}, *old;

	dp_udp_shown(real, family, to, peer.addr);
	old = bpf_map_lookup_elem(&dp_udp_handed, &peer);
	if (old && old->here == here && old->to == to && old->real[0] == real[0] &&
	    old->real[1] == real[1] && old->real[2] == real[2] && old->real[3] == real[3])
		return;
	__builtin_memcpy(h.real, real, sizeof(h.real));
	bpf_map_update_elem(&dp_udp_handed, &peer, &h, BPF_ANY);
	dp_count_handover(here);
}

/* Whether sk is bound to another rail's device (SO_BINDTODEVICE: iperf3
 * --bind-dev, socat's so-bindtodevice) than the one the packet came in on.
 * Such a server answers only through its own device, which the other rail's
 * network is not on: a connection handed to it would wait for a SYN-ACK
 * that never leaves, where refusing it fails at once. (A device that is no
 * rail, a VRF holding both, is left to the kernel.) */
static __always_inline int dp_bound_elsewhere(struct bpf_sk_lookup *ctx, struct bpf_sock *sk)
{
	__u32 in, bound = sk->bound_dev_if;

	if (!bound)
		return 0;
	DP_CTX_LOAD(in, ctx->ingress_ifindex);
	return bound != in && dp_rail_of_ifindex(bound) != DP_RAIL_NONE;
}

/* sk_lookup: a connection to this node's address on one rail, with no
 * listener there, goes to the listener on the same port on another rail;
 * a UDP datagram, to the unconnected socket bound there. */
static __always_inline int dp_handover(struct bpf_sk_lookup *ctx)
{
	struct dp_listen_key key = {};
	struct dp_flow_key seen = {};
	__u32 family, proto, lport, here, to, v;
	__u32 local[4] = {}, remote[4] = {};
	struct bpf_sock *sk;

	DP_CTX_LOAD(proto, ctx->protocol);
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
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
	key.proto = (__u8)proto;
	key.port = (__u16)lport;
	if (dp_bound_here(&key))
		return SK_PASS; /* bound to the address asked for: the kernel finds it */
	for (to = 0; to < DP_MAX_RAILS; to++) {
		if (to == here || !dp_local_addr_of(to, (__u16)family, key.addr))
			continue;
		sk = bpf_map_lookup_elem(&dp_listeners, &key);
		if (!sk)
			continue;
		if (dp_bound_elsewhere(ctx, sk)) {
			bpf_sk_release(sk);
			return SK_PASS; /* refused, at once, as without dualpath */
		}
		if (bpf_sk_assign(ctx, sk, 0) != 0) {
			bpf_sk_release(sk);
			return SK_PASS;
		}
		bpf_sk_release(sk);
		break;
	}
	if (to >= DP_MAX_RAILS)
		return SK_PASS;
	DP_CTX_LOAD(v, ctx->remote_port);
	if (proto == IPPROTO_UDP) {
		dp_udp_hand(remote, (__u16)family, (__u16)lport, bpf_ntohs((__u16)v), here, to);
		return SK_PASS;
	}
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
	seen.sport = bpf_htons((__u16)lport);
	seen.dport = (__u16)v;
	seen.proto = IPPROTO_TCP;
	bpf_map_update_elem(&dp_handed, &seen, &to, BPF_ANY);
	dp_count_handover(here);
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

/* ------------------------------------------------------------------ UDP
 * A UDP server bound to one rail's address gets the datagrams a peer placed
 * on another rail: sk_lookup hands them to it (dp_handover) once the socket
 * is in dp_listeners. No hook that sees a bind may add a socket to a
 * SOCKHASH, so cgroup post_bind counts the binds to a rail address
 * (dp_udp_binds), and the daemon then runs the iterator dp_udp_servers over
 * its namespace's UDP sockets, which adds them; tc ingress adds the one a
 * datagram in hand is for (dp_udp_ingress), so that not even the first is
 * lost. A server that connects to a handed-over peer is reached through
 * addresses rewritten in tc (dp_udp_connect_handed). */

/* A socket's own address (post_bind, sock_addr hooks: src_ip4/src_ip6). */
static __always_inline void dp_sock_src(struct bpf_sock *sk, __u16 family, __u32 *addr)
{
	if (family == DP_AF_INET) {
		addr[0] = sk->src_ip4;
	} else {
		addr[0] = sk->src_ip6[0];
		addr[1] = sk->src_ip6[1];
		addr[2] = sk->src_ip6[2];
		addr[3] = sk->src_ip6[3];
	}
}

static __always_inline void dp_bound_note(struct bpf_sock *sk, struct dp_listen_key *key)
{
	__u64 cookie = bpf_get_socket_cookie(sk);

	if (bpf_map_update_elem(&dp_bound_by, &cookie, key, BPF_ANY) == 0)
		bpf_map_update_elem(&dp_bound, key, &cookie, BPF_ANY);
}

/* cgroup post_bind: a TCP or UDP socket bound to the unspecified address
 * (which takes every address already: nothing is handed over past it), or a
 * UDP socket bound to one of this node's rail addresses, is remembered, and
 * the latter counted for the daemon's iterator. (A TCP listener on a rail
 * address is in dp_listeners from sockops.) Never refuses a bind. */
static __always_inline int dp_bind_note(struct bpf_sock *sk, __u16 family)
{
	__u32 zero = 0, addr[4] = {};
	struct dp_config *cfg = bpf_map_lookup_elem(&dp_config, &zero);
	struct dp_listen_key key = {};
	__u32 proto = sk->protocol;
	__u64 *n;

	if (!cfg || (proto != IPPROTO_UDP && proto != IPPROTO_TCP))
		return 1;
	if (cfg->netns_cookie && bpf_get_netns_cookie(sk) != cfg->netns_cookie)
		return 1;
	dp_sock_src(sk, family, addr);
	family = dp_unmapped(family, addr); /* a dual-stack socket bound to ::ffff:a.b.c.d */
	key.proto = (__u8)proto;
	key.family = (__u8)family;
	key.port = (__u16)sk->src_port;
	__builtin_memcpy(key.addr, addr, sizeof(key.addr));
	if (!(addr[0] | addr[1] | addr[2] | addr[3])) {
		dp_bound_note(sk, &key);
		return 1;
	}
	if (proto != IPPROTO_UDP || dp_local_rail(addr, family) == DP_RAIL_NONE)
		return 1;
	dp_bound_note(sk, &key);
	n = bpf_map_lookup_elem(&dp_udp_binds, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 1;
}

/* cgroup sock_release: a socket dp_bound holds is forgotten (by its cookie:
 * sock_release may not read the socket's address). */
static __always_inline void dp_bind_forget(struct bpf_sock *sk)
{
	struct dp_listen_key *key;
	__u64 cookie, *was;

	if (sk->protocol != IPPROTO_UDP && sk->protocol != IPPROTO_TCP)
		return;
	cookie = bpf_get_socket_cookie(sk);
	key = bpf_map_lookup_elem(&dp_bound_by, &cookie);
	if (!key)
		return;
	was = bpf_map_lookup_elem(&dp_bound, key);
	if (was && *was == cookie)
		bpf_map_delete_elem(&dp_bound, key);
	bpf_map_delete_elem(&dp_bound_by, &cookie);
}

/* The kernel's socket, as far as the iterator reads it (CO-RE by name). */
struct in6_addr___dp {
	union {
		__u32 u6_addr32[4];
	} in6_u;
} __attribute__((preserve_access_index));

struct sock_common___dp {
	unsigned short skc_family;
	volatile unsigned char skc_state;
	__u32 skc_rcv_saddr;
	__u16 skc_num;
	struct in6_addr___dp skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct sock___dp {
	struct sock_common___dp __sk_common;
} __attribute__((preserve_access_index));

struct inet_sock___dp {
	struct sock___dp sk;
} __attribute__((preserve_access_index));

struct udp_sock___dp {
	struct inet_sock___dp inet;
} __attribute__((preserve_access_index));

struct bpf_iter_meta___dp {
	void *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__udp {
	struct bpf_iter_meta___dp *meta;
	struct udp_sock___dp *udp_sk;
} __attribute__((preserve_access_index));

#define DP_TCP_CLOSE 7 /* an unconnected UDP socket's state */
#define DP_TCP_LISTEN 10

#define DP_ITER_RAIL 1 /* bound to one of this node's rail addresses */
#define DP_ITER_ANY 2  /* bound to the unspecified address */

/* key = the socket's own address and port (a dual-stack socket's
 * ::ffff:a.b.c.d read as IPv4); returns DP_ITER_RAIL, DP_ITER_ANY, or 0 for
 * any other address. */
static __always_inline int dp_iter_key(struct sock_common___dp *c, struct dp_listen_key *key)
{
	__u16 family = c->skc_family;
	__u32 *a = key->addr;

	if (family == DP_AF_INET) {
		a[0] = c->skc_rcv_saddr;
	} else if (family == DP_AF_INET6) {
		a[0] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[0];
		a[1] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[1];
		a[2] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[2];
		a[3] = c->skc_v6_rcv_saddr.in6_u.u6_addr32[3];
	} else {
		return 0;
	}
	family = dp_unmapped(family, a);
	key->family = (__u8)family;
	key->port = c->skc_num;
	if (!(a[0] | a[1] | a[2] | a[3]))
		return DP_ITER_ANY;
	return dp_local_rail(a, family) == DP_RAIL_NONE ? 0 : DP_ITER_RAIL;
}

/* What an iterator found, as the hooks that see a bind or a listen() note
 * it: a socket on a rail's address into dp_listeners, one on the unspecified
 * address into dp_bound (post_bind's dp_bind_note; sock_release forgets it
 * by its cookie). An update of a socket already there is harmless, and a
 * closed one has left the SOCKHASH by itself. */
static __always_inline void dp_iter_note(struct sock_common___dp *c, struct dp_listen_key *key)
{
	switch (dp_iter_key(c, key)) {
	case DP_ITER_RAIL:
		bpf_map_update_elem(&dp_listeners, key, c, BPF_ANY);
		break;
	case DP_ITER_ANY:
		dp_bound_note((struct bpf_sock *)c, key);
		break;
	}
}

/* iter/udp, one socket: an unconnected UDP socket (connected, sk_lookup may
 * not hand it anything). */
static __always_inline int dp_udp_note(struct bpf_iter__udp *ctx)
{
	struct udp_sock___dp *u = ctx->udp_sk;
	struct dp_listen_key key = {.proto = IPPROTO_UDP};
	struct sock_common___dp *c;

	if (!u)
		return 0;
	c = &u->inet.sk.__sk_common;
	if (c->skc_state == DP_TCP_CLOSE)
		dp_iter_note(c, &key);
	return 0;
}

struct bpf_iter__tcp {
	struct bpf_iter_meta___dp *meta;
	struct sock_common___dp *sk_common;
} __attribute__((preserve_access_index));

/* iter/tcp, one socket: a TCP listener. The daemon runs it after each
 * commit, for the listeners that sockops and post_bind could not see: those
 * that began listening before the datapath was attached, or on an address
 * that has only now become a rail's. Without it, such a listener on the
 * address a SYN asked for would not stop sk_lookup from handing the SYN to
 * a listener on another rail's address. The SOCKHASH update takes the
 * socket's spinlock: the kernel's TCP iterator holds only the socket's owner
 * lock since Linux 6.5 (before, the spinlock itself), so the daemon runs it
 * on 6.5 and later only. */
static __always_inline int dp_tcp_listener_note(struct bpf_iter__tcp *ctx)
{
	struct sock_common___dp *c = ctx->sk_common;
	struct dp_listen_key key = {.proto = IPPROTO_TCP};

	if (c && c->skc_state == DP_TCP_LISTEN)
		dp_iter_note(c, &key);
	return 0;
}

/* A UDP datagram's source (src = 1) or destination address rewritten to
 * addr (IPv4 in addr[0]), the IPv4 header's and the UDP checksum with it.
 * Returns 0 on success. */
static __always_inline int dp_udp_rewrite(struct __sk_buff *skb, const struct dp_pkt *pkt, int src,
					  const __u32 *addr)
{
	__u32 csum = pkt->l4_off + __builtin_offsetof(struct udphdr, check);

	if (pkt->family == DP_AF_INET) {
		__u32 old = src ? pkt->key.saddr[3] : pkt->key.daddr[3];
		__u32 at = pkt->l3_off + (src ? __builtin_offsetof(struct iphdr, saddr)
					      : __builtin_offsetof(struct iphdr, daddr));

		if (bpf_l4_csum_replace(skb, csum, old, addr[0],
					BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0 | sizeof(__u32)) ||
		    bpf_l3_csum_replace(skb, pkt->l3_off + __builtin_offsetof(struct iphdr, check),
					old, addr[0], sizeof(__u32)))
			return -1;
		return bpf_skb_store_bytes(skb, at, addr, sizeof(__u32), 0) ? -1 : 0;
	}
	{
		__u32 old[4], now[4];
		__u32 at = pkt->l3_off + (src ? __builtin_offsetof(struct ipv6hdr, saddr)
					      : __builtin_offsetof(struct ipv6hdr, daddr));
		__s64 diff;

		__builtin_memcpy(old, src ? pkt->key.saddr : pkt->key.daddr, sizeof(old));
		__builtin_memcpy(now, addr, sizeof(now));
		diff = bpf_csum_diff(old, sizeof(old), now, sizeof(now), 0);
		if (diff < 0 || bpf_l4_csum_replace(skb, csum, 0, (__u32)diff,
						    BPF_F_PSEUDO_HDR | BPF_F_MARK_MANGLED_0))
			return -1;
		return bpf_skb_store_bytes(skb, at, now, sizeof(now), 0) ? -1 : 0;
	}
}

/* A datagram's address (dst = 1: its destination) as dp_listen_key holds
 * addresses (IPv4 in addr[0]). */
static __always_inline void dp_pkt_addr(const struct dp_pkt *pkt, int dst, __u32 *addr)
{
	const __u32 *a = dst ? pkt->key.daddr : pkt->key.saddr;

	if (pkt->family == DP_AF_INET) {
		addr[0] = a[3];
		addr[1] = addr[2] = addr[3] = 0;
	} else {
		__builtin_memcpy(addr, a, 4 * sizeof(__u32));
	}
}

/* The rail whose address on this node a packet is for, when no socket is
 * bound there (key: that address, port and key->proto); DP_RAIL_NONE when
 * it is for no rail's address or the kernel finds a socket for it. */
static __always_inline __u32 dp_unbound_rail(const struct dp_pkt *pkt, struct dp_listen_key *key)
{
	__u32 here;

	dp_pkt_addr(pkt, 1, key->addr);
	here = dp_local_rail(key->addr, pkt->family);
	if (here == DP_RAIL_NONE)
		return DP_RAIL_NONE;
	key->family = (__u8)pkt->family;
	key->port = bpf_ntohs(pkt->key.dport);
	return dp_bound_here(key) ? DP_RAIL_NONE : here;
}

/* The tuple the kernel would look a packet up by, had it been addressed to
 * `local` (this node's address on another rail; IPv4 in local[0]); returns
 * its length. */
static __always_inline __u32 dp_tuple_to(const struct dp_pkt *pkt, const __u32 *local,
					 struct bpf_sock_tuple *t)
{
	if (pkt->family == DP_AF_INET) {
		t->ipv4.saddr = pkt->key.saddr[3];
		t->ipv4.daddr = local[0];
		t->ipv4.sport = pkt->key.sport;
		t->ipv4.dport = pkt->key.dport;
		return sizeof(t->ipv4);
	}
	__builtin_memcpy(t->ipv6.saddr, pkt->key.saddr, sizeof(t->ipv6.saddr));
	__builtin_memcpy(t->ipv6.daddr, local, sizeof(t->ipv6.daddr));
	t->ipv6.sport = pkt->key.sport;
	t->ipv6.dport = pkt->key.dport;
	return sizeof(t->ipv6);
}

/* The handed-over peer `real`:rport of the server on port lport at rail
 * `to`'s address, whose datagrams were addressed to rail `here` (NULL when
 * it is none). */
static __always_inline struct dp_udp_handed *
dp_udp_handed_of(const __u32 *real, __u16 family, __u16 lport, __u16 rport, __u32 here, __u32 to)
{
	struct dp_udp_peer peer = {.lport = lport, .rport = rport, .family = (__u8)family};
	struct dp_udp_handed *h;

	dp_udp_shown(real, family, to, peer.addr);
	h = bpf_map_lookup_elem(&dp_udp_handed, &peer);
	if (!h || h->here != here || h->to != to || h->real[0] != real[0] ||
	    h->real[1] != real[1] || h->real[2] != real[2] || h->real[3] != real[3])
		return 0;
	return h;
}

/* tc ingress, a UDP datagram for this node's address on rail `here`, where
 * no socket is bound (a socket bound there always gets it):
 * - from a peer already handed over to a server bound to another rail's
 *   address, whose socket is now connected to that peer
 *   (dp_udp_connect_handed): its destination becomes the server's address,
 *   which the kernel's own lookup then finds (sk_lookup hands nothing to a
 *   connected socket). A node that routes by source with a strict
 *   reverse-path filter drops it then: the way back from the server's
 *   address leaves by the server's rail;
 * - else, a server bound to the same port on another rail's address (dp_bound,
 *   from its bind) goes into dp_listeners now, so that sk_lookup hands this
 *   very datagram over. The iterator adds it only at the daemon's next tick,
 *   and a server that hears from its first peer right after its bind
 *   (iperf3's UDP test, any exchange begun over a control connection) would
 *   lose what came before. The socket is the one the kernel finds for the
 *   datagram as if it had been sent to that address, and only an unconnected
 *   one.
 * Costs one array lookup until some socket was bound to a rail's address. */
static __always_inline void dp_udp_ingress(struct __sk_buff *skb, const struct dp_pkt *pkt)
{
	struct dp_listen_key key = {.proto = IPPROTO_UDP};
	struct bpf_sock_tuple t = {};
	__u32 zero = 0, here, to, len, real[4];
	__u64 *binds = bpf_map_lookup_elem(&dp_udp_binds, &zero);
	__u16 family = pkt->family;
	struct bpf_sock *sk;
	int connected;

	if (!binds || !*binds || pkt->key.proto != IPPROTO_UDP)
		return;
	here = dp_unbound_rail(pkt, &key);
	if (here == DP_RAIL_NONE)
		return; /* no rail's address, or the kernel finds a socket there */
	dp_pkt_addr(pkt, 0, real);
	for (to = 0; to < DP_MAX_RAILS; to++) {
		if (to == here || !dp_local_addr_of(to, family, key.addr))
			continue;
		len = dp_tuple_to(pkt, key.addr, &t);
		/* (before dp_bound: it holds the last socket bound to an address,
		 * and a server that bound another beside it and closed that one,
		 * as iperf3's does, is no longer there) */
		if (dp_udp_handed_of(real, family, key.port, bpf_ntohs(pkt->key.sport), here, to)) {
			sk = bpf_sk_lookup_udp(skb, &t, len, BPF_F_CURRENT_NETNS, 0);
			if (!sk)
				return;
			connected = sk->state != DP_TCP_CLOSE;
			bpf_sk_release(sk);
			if (connected)
				dp_udp_rewrite(skb, pkt, 0, key.addr);
			return; /* else sk_lookup hands it over as it is */
		}
		if (!bpf_map_lookup_elem(&dp_bound, &key))
			continue; /* nothing bound there */
		if (dp_listening(&key))
			return; /* sk_lookup has it already */
		sk = bpf_sk_lookup_udp(skb, &t, len, BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			return;
		if (sk->state == DP_TCP_CLOSE) /* unconnected */
			bpf_map_update_elem(&dp_listeners, &key, sk, BPF_ANY);
		bpf_sk_release(sk);
		return;
	}
}

/* tc ingress, a TCP SYN for this node's address on rail `here` where
 * nothing listens, while dp_listeners holds no listener on the same port at
 * another rail's address: the one the kernel finds there now, if any, goes
 * in, so that sk_lookup hands this SYN over. sockops put each listener in
 * when it began listening, and the last of a SO_REUSEPORT group (nginx's,
 * envoy's, gunicorn's workers) to do so stands for the group; when that one
 * closes, the others would be out of reach until another listens. Costs a
 * socket lookup for a SYN nothing takes, none for any other packet. */
static __always_inline void dp_tcp_ingress(struct __sk_buff *skb, const struct dp_pkt *pkt)
{
	struct dp_listen_key key = {.proto = IPPROTO_TCP};
	struct bpf_sock_tuple t = {};
	__u32 here, to, len;
	__u16 family = pkt->family;
	struct bpf_sock *sk;

	if (pkt->key.proto != IPPROTO_TCP || (pkt->tcp_flags & 0x12) != 0x02)
		return; /* a SYN, not a SYN-ACK */
	here = dp_unbound_rail(pkt, &key);
	if (here == DP_RAIL_NONE)
		return;
	for (to = 0; to < DP_MAX_RAILS; to++) {
		if (to == here || !dp_local_addr_of(to, family, key.addr))
			continue;
		if (dp_listening(&key))
			return; /* sk_lookup has one */
		len = dp_tuple_to(pkt, key.addr, &t);
		sk = bpf_sk_lookup_tcp(skb, &t, len, BPF_F_CURRENT_NETNS, 0);
		if (!sk)
			continue;
		if (sk->state == DP_TCP_LISTEN)
			bpf_map_update_elem(&dp_listeners, &key, sk, BPF_ANY);
		bpf_sk_release(sk);
		return;
	}
}

/* tc egress, a datagram from this node's address on one rail (a server's)
 * to a handed-over peer's real address (dp_udp_connect_handed connected it
 * there): it leaves from this node's address on the rail the peer's
 * datagrams came on, as the peer's connected socket requires; pkt's key
 * then holds the new source. Returns that rail, or DP_RAIL_NONE when the
 * datagram is none of these. */
static __always_inline __u32 dp_udp_egress(struct __sk_buff *skb, struct dp_pkt *pkt)
{
	struct dp_udp_peer peer = {.family = (__u8)pkt->family};
	__u32 zero = 0, from, src[4], real[4];
	__u64 *binds = bpf_map_lookup_elem(&dp_udp_binds, &zero);
	struct dp_udp_handed *h;

	if (!binds || !*binds || pkt->key.proto != IPPROTO_UDP)
		return DP_RAIL_NONE;
	dp_pkt_addr(pkt, 0, src);
	from = dp_local_rail(src, pkt->family);
	if (from == DP_RAIL_NONE)
		return DP_RAIL_NONE;
	/* the peer as the server sees it depends only on the server's rail */
	dp_pkt_addr(pkt, 1, real);
	dp_udp_shown(real, pkt->family, from, peer.addr);
	peer.lport = bpf_ntohs(pkt->key.sport);
	peer.rport = bpf_ntohs(pkt->key.dport);
	h = bpf_map_lookup_elem(&dp_udp_handed, &peer);
	if (!h || h->to != from || h->here == from || h->here >= DP_MAX_RAILS ||
	    h->real[0] != real[0] || h->real[1] != real[1] || h->real[2] != real[2] ||
	    h->real[3] != real[3])
		return DP_RAIL_NONE;
	if (!dp_local_addr_of(h->here, pkt->family, src) || dp_udp_rewrite(skb, pkt, 1, src))
		return DP_RAIL_NONE;
	if (pkt->family == DP_AF_INET)
		pkt->key.saddr[3] = src[0];
	else
		__builtin_memcpy(pkt->key.saddr, src, sizeof(pkt->key.saddr));
	return h->here;
}

/* connect() of a UDP server's socket (bound to this node's address on one
 * rail) to a peer handed over to it, as recvmsg() showed that peer: the
 * socket is connected to the peer's real address, where the peer's
 * datagrams come from, and getpeername() shows what it asked for. tc gives
 * what it sends the source the peer expects (dp_udp_egress) and what comes
 * in the server's address (dp_udp_ingress). iperf3's UDP server, and any
 * that takes a socket per peer, connect so. Returns 1 when it was one. (The
 * caller checked dp_connect_config.) */
static __always_inline int dp_udp_connect_handed(struct bpf_sock_addr *ctx, __u16 family)
{
	__u32 local[4] = {}, shown[4] = {}, to, r;
	struct bpf_sock *sk = ctx->sk;
	struct dp_sock_orig fresh = {}, *st;
	struct dp_udp_peer peer = {};
	struct dp_udp_handed *h;
	__u64 cookie;
	__u16 as;

	if (!sk || ctx->protocol != IPPROTO_UDP)
		return 0;
	dp_sock_src(sk, family, local);
	as = dp_unmapped(family, local);
	to = dp_local_rail(local, as);
	if (to == DP_RAIL_NONE || dp_load_placed(ctx, family, shown) != as)
		return 0;
	peer.family = (__u8)as;
	peer.lport = (__u16)sk->src_port;
	peer.rport = bpf_ntohs((__u16)ctx->user_port);
	__builtin_memcpy(peer.addr, shown, sizeof(peer.addr));
	h = bpf_map_lookup_elem(&dp_udp_handed, &peer);
	if (!h || h->to != to)
		return 0;
	cookie = bpf_get_socket_cookie(ctx);
	bpf_map_update_elem(&dp_sock_orig, &cookie, &fresh, BPF_NOEXIST);
	st = bpf_map_lookup_elem(&dp_sock_orig, &cookie);
	if (!st)
		return 0; /* table full: left as it was */
	for (r = 0; r < 4; r++)
		local[r] = h->real[r];
	dp_place_note(st, local, shown, (__u16)ctx->user_port, as);
	dp_store_placed(ctx, family, as, local);
	return 1;
}

/* connect(): a UDP server's to a handed-over peer, or else placement. */
static __always_inline int dp_connect_or_handed(struct bpf_sock_addr *ctx, __u16 family)
{
	if (dp_connect_config(ctx) && dp_udp_connect_handed(ctx, family))
		return 1;
	return dp_connect(ctx, family);
}

/* recvmsg() of a server a peer's datagrams were handed to: the peer on the
 * server's own rail, as a TCP server sees its handed-over peer. (The caller
 * checked dp_connect_config.) */
static __always_inline void dp_udp_restore(struct bpf_sock_addr *ctx, __u16 family)
{
	struct dp_udp_peer peer = {};
	__u32 local[4] = {}, real[4] = {}, to;
	struct bpf_sock *sk = ctx->sk;
	struct dp_udp_handed *h;
	__u16 as;

	if (!sk || ctx->protocol != IPPROTO_UDP)
		return;
	dp_sock_src(sk, family, local);
	/* a dual-stack socket's: its own and its peer's IPv4-mapped addresses */
	as = dp_unmapped(family, local);
	to = dp_local_rail(local, as);
	if (to == DP_RAIL_NONE || dp_load_placed(ctx, family, real) != as)
		return;
	peer.family = (__u8)as;
	dp_udp_shown(real, as, to, peer.addr);
	peer.lport = (__u16)sk->src_port;
	peer.rport = bpf_ntohs((__u16)ctx->user_port);
	h = bpf_map_lookup_elem(&dp_udp_handed, &peer);
	if (!h || h->to != to || h->real[0] != real[0] || h->real[1] != real[1] ||
	    h->real[2] != real[2] || h->real[3] != real[3])
		return;
	dp_store_placed(ctx, family, as, peer.addr);
}

/* recvmsg(): a placed socket's peer as asked for; a handed-over peer as the
 * server's rail shows it. */
static __always_inline int dp_recvmsg(struct bpf_sock_addr *ctx, __u16 family)
{
	if (dp_connect_config(ctx) && !dp_restore_placed(ctx, family))
		dp_udp_restore(ctx, family);
	return 1;
}

/* sendto() of such a server to a handed-over peer: back the way its
 * datagrams came, from this node's address on the rail they were addressed
 * to (a connected client takes nothing else). Returns 1 when it was one. */
static __always_inline int dp_udp_reply(struct bpf_sock_addr *ctx, __u16 family)
{
	struct dp_udp_peer peer = {.family = (__u8)family};
	__u32 local[4] = {}, src[4] = {};
	struct bpf_sock *sk = ctx->sk;
	struct dp_udp_handed *h;

	if (!sk || ctx->protocol != IPPROTO_UDP)
		return 0;
	dp_load_addr(ctx, family, peer.addr);
	peer.lport = (__u16)sk->src_port;
	peer.rport = bpf_ntohs((__u16)ctx->user_port);
	h = bpf_map_lookup_elem(&dp_udp_handed, &peer);
	if (!h)
		return 0;
	dp_sock_src(sk, family, local);
	if (dp_local_rail(local, family) != h->to || !dp_local_addr_of(h->here, family, src))
		return 0;
	dp_store_addr(ctx, family, h->real);
	if (family == DP_AF_INET) {
		ctx->msg_src_ip4 = src[0];
	} else {
		ctx->msg_src_ip6[0] = src[0];
		ctx->msg_src_ip6[1] = src[1];
		ctx->msg_src_ip6[2] = src[2];
		ctx->msg_src_ip6[3] = src[3];
	}
	return 1;
}

/* sendmsg(): a reply to a handed-over peer, or else placement. */
static __always_inline int dp_sendmsg(struct bpf_sock_addr *ctx, __u16 family)
{
	if (dp_connect_config(ctx) && dp_udp_reply(ctx, family))
		return 1;
	return dp_connect(ctx, family);
}

#endif /* DP_BPF_LISTEN_H */

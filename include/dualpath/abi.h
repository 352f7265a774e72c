/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dualpath ABI: every struct, constant and enum shared by the BPF programs
 * (bpf/) and the C++ daemon (daemon/). This is the only place they are
 * defined; both sides include this file, so there is no "keep in sync" copy.
 *
 * Rules for this header:
 *  - C only (it is compiled by clang -target bpf and by g++), fixed-width
 *    __u* types from <linux/types.h>, explicit padding, no bitfields;
 *  - changing a struct that backs a pinned map changes the map's value size:
 *    append fields, never reorder them, and bump DP_LAYOUT_VERSION (below);
 *    a running node is then upgraded in place (docs/ARCHITECTURE.md,
 *    "Upgrades").
 */
#ifndef DUALPATH_ABI_H
#define DUALPATH_ABI_H

#include <linux/bpf.h> /* struct bpf_spin_lock */
#include <linux/types.h>

/*
 * The layout version of the pinned maps. Bump it with any change to a struct
 * below that backs a pinned map, or to a map's type, key or size in
 * bpf/lib/maps.h. A daemon that finds pins of another version (or of none:
 * builds before versioning) upgrades them in place: it loads its own datapath
 * beside the old one, copies what must survive, swaps the programs
 * atomically and re-pins (daemon/kernel/upgrade.cpp, docs/ARCHITECTURE.md
 * "Upgrades"). Structs evolve by appending fields: a copy keeps the common
 * prefix of a value and zero-fills the rest.
 *
 * DP_ABI_TEST_LAYOUT is a test-only build (tests/lab: dualpathd-layout-test)
 * with a deliberately different layout, so that the lab can upgrade across
 * a real layout change.
 */
#ifdef DP_ABI_TEST_LAYOUT
#define DP_LAYOUT_VERSION 0x8001u
#else
/* 2: dp_flow.tail_ns, dp_cell_cfg.flags; 3: bursts; 4: dp_rail.subflow_pace, dp_joins;
 * 5: dp_class_qos.ack_priority, ack_dscp; 6: dp_class_tcp.rto_max_ms, user_timeout_ms;
 * 7: dp_plan.flags */
#define DP_LAYOUT_VERSION 7u
#endif

/* dp_abi: ARRAY with one element, written by the daemon: the layout version
 * of the maps pinned beside it. Its own layout never changes. */
struct dp_abi {
  __u32 layout;
  __u32 reserved[3];
};

#define DP_MAX_RAILS 4
#define DP_MAX_CLASSES 16
/* Slot value meaning "no class": unclassified traffic is never steered. */
#define DP_CLASS_NONE 0xff
/* Slot used in counters for unclassified traffic. */
#define DP_CLASS_UNCLASSIFIED (DP_MAX_CLASSES - 1)
#define DP_RAIL_NONE 0xff

/* Shares are in units of 1/DP_SHARE_SCALE of a class's new flows. */
#define DP_SHARE_SCALE 10000

/*
 * Bit set in skb->mark by the egress classifier when it redirects a packet
 * to another rail. The other rail's egress hook sees it, counts the packet
 * and passes it untouched (a redirected packet is never classified twice).
 * The bit is cleared there again; marks never leave the host. Policies may
 * not use this bit in any mark (validated).
 */
#define DP_MARK_REDIRECTED 0x40000000u

/* dp_mark_bits: ARRAY with one element: the skb->mark bits dualpath uses
 * ([routing] mark_mask: path fwmarks and class marks live there; other bits
 * belong to others, such as Calico, Cilium or kube-proxy, and are ignored
 * and kept) and its redirect bit ([routing] redirect_mark, inside the mask).
 * Never written (all zero): every bit, and DP_MARK_REDIRECTED. */
struct dp_mark_bits {
  __u32 mask;
  __u32 redirect;
};

/* Two generations of classification tables; the daemon fills the inactive
 * one and flips dp_config.active_gen, so a reload is atomic for every packet. */
#define DP_GENERATIONS 2
#define DP_PORT_SPACE 65536

/* Index into struct dp_port_entry.cls */
enum dp_port_slot {
  DP_PORT_TCP_DST = 0,
  DP_PORT_TCP_SRC = 1,
  DP_PORT_UDP_DST = 2,
  DP_PORT_UDP_SRC = 3,
  DP_PORT_SLOTS = 4,
};

/* dp_ports: ARRAY, key = gen * DP_PORT_SPACE + port. O(1) classification. */
struct dp_port_entry {
  __u8 cls[DP_PORT_SLOTS]; /* class slot or DP_CLASS_NONE */
};

/* dp_marks: HASH, socket mark (skb->mark) -> class slot, per generation.
 * DP_CLASS_NONE for the paths' fwmarks: a socket marked with one asked for
 * that path (the policy's fwmark rule routes it there) and is not steered. */
struct dp_mark_key {
  __u32 gen;
  __u32 mark;
};

struct dp_mark_val {
  __u8 cls;
  __u8 pad[3];
};

/* dp_config: ARRAY with one element. */
struct dp_config {
  __u32 active_gen;
  __u32 default_class;  /* class slot for unmatched TCP/UDP, or DP_CLASS_NONE */
  __u64 flowlet_gap_ns; /* 0 = flows keep their rail until it loses its share */
  __u64 netns_cookie;   /* sockops only counts sockets of this netns (0: any) */
};

enum dp_rail_flags {
  DP_RAIL_F_ENABLED = 1u << 0, /* may be a redirect target */
  DP_RAIL_F_GW4 = 1u << 1,     /* gw4 is valid */
  DP_RAIL_F_GW6 = 1u << 2,     /* gw6 is valid */
  DP_RAIL_F_CONNECT = 1u << 3, /* separate topology: a target of connect-time placement */
  /* shared topology with a multipath class: the daemon counts the rail usable
   * (health), so a multipath subflow accepted here is answered on the rail it
   * arrives on (bpf/lib/tc.h) */
  DP_RAIL_F_MP_UP = 1u << 4,
};

/* dp_rails: ARRAY, key = rail slot. */
struct dp_rail {
  __u32 ifindex;
  __u32 flags; /* enum dp_rail_flags */
  __u32 gw4;   /* network byte order */
  __u32 gw6[4];
  /* the most a multipath class's subflow on this rail is paced at, in bytes
   * per second (SO_MAX_PACING_RATE, bpf/lib/sockops.h): the rail's capacity;
   * 0 = not capped (no capacity, or one above what the 32-bit option holds) */
  __u32 subflow_pace;
};

/* Which rail a hook is on, by skb->ifindex: dp_rail_by_ifindex is an ARRAY
 * indexed directly by ifindex (value: rail slot + 1, 0 = not a rail) for
 * ifindex < DP_IFINDEX_DIRECT, which the verifier inlines; dp_ifindex, a
 * HASH, holds every rail's ifindex and answers for larger ones. */
#define DP_IFINDEX_DIRECT 65536
/* dp_ifindex: HASH, ifindex -> rail slot; tells a hook which rail it is on. */
struct dp_ifindex_val {
  __u32 rail;
};

enum dp_decision_flags {
  DP_DECISION_F_PINNED = 1u << 0, /* set by an operator (policy or dpctl) */
};

/* dp_decisions: ARRAY, key = class slot. The share of new flows per rail;
 * shares sum to DP_SHARE_SCALE. Written by the daemon only. */
struct dp_decision {
  __u16 share[DP_MAX_RAILS];
  __u32 flags;   /* enum dp_decision_flags */
  __u32 version; /* bumped on every change */
};

/*
 * Flowcells: a split elastic class (shared topology) is placed in cells of
 * 2^cell_shift bytes of a flow, each on the rail where it would finish first
 * given what cells already queued there (earliest completion first, by each
 * rail's capacity), among the rails the class's decision gives a share. A
 * rail's virtual queue is the time at which the cells put on it will have
 * drained at the capacity the daemon left them (the rail's capacity minus
 * what other traffic uses).
 *
 * dp_cells: ARRAY with one element, written by the daemon. All zero: no
 * cells (flowlets and shares place every class).
 */
struct dp_cell_cfg {
  __u32 cell_shift; /* cell = 1 << cell_shift bytes; 0: cells off */
  __u32 class_mask; /* bit c: class slot c is placed by cells while split */
  /* time 1024 bytes take on the rail, in ns (0: not a target): a multiply
   * and a shift per packet, no division */
  __u32 ns_per_kib[DP_MAX_RAILS];
  __u32 flags; /* enum dp_cell_flags */
};

enum dp_cell_flags {
  /* a cell may overtake the flow's own bytes on another rail (reordering);
   * without it, a flow moves only when its last byte would arrive first */
  DP_CELL_F_ANY_ORDER = 1u << 0,
  /* bursts instead of cells: the classes in class_mask are placed a whole
   * burst at a time (a burst ends at an idle gap of dp_config.flowlet_gap_ns),
   * each flow's next burst on the rail the daemon planned for it (dp_plans);
   * cell_shift and ns_per_kib are not used */
  DP_CELL_F_BURSTS = 1u << 1,
};

/*
 * Burst placement (DP_CELL_F_BURSTS). The datapath measures each flow's
 * bursts (dp_flow.burst_bytes, last_burst); the daemon reads them (4,096
 * flows a tick: Datapath::burst_flows) and plans where each flow's next
 * burst goes so that the bursts of a round finish together on all rails
 * (largest first, each where it would finish first given the capacity
 * left: daemon/core/bursts.cpp), and writes the plan here. A flow changes
 * rail only at the start of a burst, after an idle gap: never in the middle
 * of one, so a burst is never reordered.
 *
 * A stream is the exception: a flow that has sent without a gap for longer
 * than the daemon waits for one (a bulk transfer: parameter or KV-cache
 * sync, checkpoints). No gap will come to move it, so its plan carries
 * DP_PLAN_F_STREAM and the flow follows it in the middle of its burst, at
 * the next DP_STREAM_STEP bytes it sends: one reordering per move, which the
 * daemon makes rarely (daemon/core/bursts.cpp, plan_streams).
 *
 * dp_plans: HASH, flow key -> the rail slot of the flow's next burst. Written
 * by the daemon only; a flow without an entry stays where it is.
 */
#define DP_PLAN_TABLE_SIZE 4096 /* the daemon plans the largest bursts first */
#define DP_STREAM_STEP_SHIFT 20 /* a stream looks at its plan every MiB it sends */
enum dp_plan_flags {
  DP_PLAN_F_STREAM = 1u << 0, /* follow the plan now, not at the next burst */
};
struct dp_plan {
  __u32 rail;
  __u32 version; /* bumped by the daemon on every plan it writes */
  __u32 flags;   /* enum dp_plan_flags */
};

/* dp_vq: ARRAY with one element, written by the datapath: per rail slot, the
 * bpf_ktime_get_ns() at which the cells queued there will have drained. */
struct dp_vq {
  __u64 finish_ns[DP_MAX_RAILS];
};

/* dp_class_qos: ARRAY, key = class slot. What the egress program stamps on
 * every packet of the class, so that the rail's qdisc (and, by DSCP, NIC and
 * switch queues) can serve latency-sensitive classes ahead of bulk ones.
 * The class's pure ACKs (TCP, no data, no SYN, FIN or RST) may get their own
 * ([qos] in the policy): a bulk class's ACKs then do not wait behind
 * another class's data that a strict-priority queue serves first. */
enum dp_qos_flags {
  DP_QOS_F_PRIORITY = 1u << 0,     /* set skb->priority */
  DP_QOS_F_DSCP = 1u << 1,         /* rewrite the DSCP bits of the IP header */
  DP_QOS_F_ACK_PRIORITY = 1u << 2, /* pure ACKs: ack_priority instead of priority */
  DP_QOS_F_ACK_DSCP = 1u << 3,     /* pure ACKs: ack_dscp instead of dscp */
};
struct dp_class_qos {
  __u32 priority; /* skb->priority: a tc class id (major:minor) or 0-7 */
  __u8 dscp;      /* 0-63 */
  __u8 flags;     /* enum dp_qos_flags */
  __u8 pad[2];
  __u32 ack_priority; /* the same, for the class's pure ACKs */
  __u8 ack_dscp;
  __u8 pad2[3];
};

/* dp_class_tcp: ARRAY, key = class slot. TCP settings sockops applies to a
 * classified connection when it is established. */
struct dp_class_tcp {
  __u32 rto_min_us; /* TCP_BPF_RTO_MIN (at most the kernel's 200 ms); 0: the kernel's */
  __u32 flags;      /* DP_CLASS_TCP_F_*; was padding (zero), so the layout holds */
  /* TCP_RTO_MAX_MS (Linux 6.15+; 1 s to 120 s): the longest a backed-off
   * retransmission waits, so that a connection finds a rail that came back
   * within it; 0: the kernel's 120 s */
  __u32 rto_max_ms;
  /* TCP_USER_TIMEOUT set with rto_max_ms on a socket that has none, so that
   * it lives through an outage as long as the kernel's backoff would have
   * let it (the kernel counts tcp_retries2 against the capped backoff) */
  __u32 user_timeout_ms;
};

/* The class's TCP sockets are made MPTCP when they are created (bpf/lib/mptcp.h),
 * and the daemon gives each connection a subflow per rail. */
#define DP_CLASS_TCP_F_MULTIPATH (1u << 0)

/* dp_class_names / dp_rail_names: ARRAY, key = slot. Slots are stable across
 * reloads and restarts: a class keeps its slot (and so its counters) for as
 * long as a policy names it. Empty name = free slot. */
#define DP_NAME_LEN 32
struct dp_slot_name {
  char name[DP_NAME_LEN];
};

enum dp_flow_flags {
  /* last_seen_ns came from the coarse clock (the class was not split over
   * rails, so no flowlet timing was needed): it cannot mark a flowlet gap */
  DP_FLOW_F_COARSE_TIME = 1u << 0,
  /* bursts: this burst outgrew what the flow's last one said, and moved to
   * the class's main rail (once per burst) */
  DP_FLOW_F_OVERFLOW = 1u << 1,
  /* bursts: the flow is a stream (its plan says DP_PLAN_F_STREAM): it goes
   * where its plan says, at a burst's start and every DP_STREAM_STEP bytes */
  DP_FLOW_F_STREAM = 1u << 2,
};

/* dp_flows: LRU_HASH. Addresses are IPv4-mapped for IPv4 (::ffff:a.b.c.d). */
struct dp_flow_key {
  __u32 saddr[4];
  __u32 daddr[4];
  __u16 sport; /* network byte order */
  __u16 dport; /* network byte order */
  __u8 proto;
  __u8 pad[3];
};

struct dp_flow {
  __u64 first_seen_ns;
  __u64 last_seen_ns;
  __u64 bytes;
  __u64 packets;
  __u32 gen;          /* classification generation the class was taken from */
  __u8 cls;           /* class slot */
  __u8 rail;          /* rail slot the flow is placed on */
  __u8 flags;         /* enum dp_flow_flags */
  __u8 rule;          /* enum dp_rule: what classified the flow */
  __u32 flowlet;      /* flowlets started for this flow */
  __u32 replacements; /* times the flow changed rail */
  /* TCP, from sockops (0 for UDP and until the first RTT sample) */
  __u32 srtt_us;      /* smoothed RTT */
  __u32 retrans_segs; /* retransmitted segments */
  __u32 rto_events;
  __u32 data_segs_out; /* last value seen, to count deltas per rail and class */
  /* cells: when the flow's last byte leaves its rail's virtual queue (dp_vq
   * time); a cell may go to another rail only if it would start there after
   * this, so that it cannot overtake the flow's own bytes */
  __u64 tail_ns;
  /* bursts (DP_CELL_F_BURSTS): bytes since the flow's current burst began,
   * and the size of the burst before it */
  __u64 burst_bytes;
  __u64 last_burst;
#ifdef DP_ABI_TEST_LAYOUT
  __u64 test_only;
#endif
};

/* What classified a packet, in the order the classifier tries them: the
 * socket's mark, the destination then the source port, the socket's cgroup,
 * the policy's default class. */
enum dp_rule {
  DP_RULE_NONE = 0,
  DP_RULE_MARK,
  DP_RULE_PORT,
  DP_RULE_CGROUP,
  DP_RULE_DEFAULT,
};

/*
 * Classes by cgroup (policy keys cgroups and units, and dpctl run). The
 * egress program reads the cgroup v2 id of the packet's socket (the cgroup
 * the socket was created in; an accepted socket has its listener's), and the
 * connect-time programs the cgroup of the calling task.
 *
 * dp_cgroups: HASH, {gen, cgroup id} -> class slot: the cgroups a policy
 * names (a class takes their whole subtree; the deepest named one wins).
 * dp_cgroup_cache: LRU_HASH, {gen, cgroup id} -> class slot or
 * DP_CLASS_NONE: the answer for a socket's own cgroup, so that a packet
 * costs one lookup. A miss walks the cgroup's ancestors, at most
 * DP_CGROUP_MAX_LEVEL levels below the root. The daemon empties a
 * generation's cache whenever what its dp_cgroups holds changes.
 * dp_cgroup_gens: ARRAY with one __u32: bit g set when generation g names a
 * cgroup; the lookup is skipped otherwise. (A map of its own, not a field of
 * dp_config: the pinned dp_config of a running node keeps its layout, so an
 * upgrade adopts it.)
 */
#define DP_CGROUP_MAX_LEVEL 16
#define DP_CGROUP_CACHE_SIZE 16384
struct dp_cgroup_key {
  __u64 id;
  __u32 gen;
  __u32 pad;
};

struct dp_cgroup_val {
  __u8 cls;
  __u8 pad[3];
};

/* dp_counters: PERCPU_ARRAY, key = rail * DP_MAX_CLASSES + class slot
 * (DP_CLASS_UNCLASSIFIED for traffic of no class). The daemon sums CPUs. */
struct dp_counters {
  __u64 tx_bytes; /* left by this rail (after any redirect) */
  __u64 tx_packets;
  __u64 rx_bytes; /* arrived on this rail */
  __u64 rx_packets;
  __u64 redirect_packets; /* classified here, sent to another rail */
  __u64 redirect_bytes;
  __u64 flows_placed;   /* new flows placed on this rail */
  __u64 flows_replaced; /* existing flows moved to this rail */
  __u64 flowlets;       /* flowlets started here after an idle gap (split classes) */
#ifdef DP_ABI_TEST_LAYOUT
  __u64 test_only;
#endif
};

/* dp_tcp: PERCPU_ARRAY, key = rail * DP_MAX_CLASSES + class slot. TCP
 * figures from sockops for sockets whose flow is classified. RTT samples are
 * the socket's smoothed RTT at each RTT callback, in log2 microsecond buckets:
 * bucket i counts [2^i, 2^(i+1)) us (bucket 0 also counts 0). */
#define DP_RTT_BUCKETS 32
struct dp_tcp_stats {
  __u64 rtt_hist[DP_RTT_BUCKETS];
  __u64 rtt_samples;
  __u64 srtt_us_sum;
  __u64 segs_out;     /* data segments sent */
  __u64 retrans_segs; /* retransmitted segments */
  __u64 rto_events;
};

/*
 * Exceptions: packets the programs did not steer, by reason. The datapath is
 * fail-open: every one of these packets is passed on its routed rail, none is
 * dropped by dualpath. dp_exceptions: PERCPU_ARRAY, key = rail * DP_EXC_MAX +
 * reason.
 */
enum dp_exception {
  DP_EXC_NON_IP = 0,         /* not IPv4/IPv6 (ARP, LLDP, ...) */
  DP_EXC_SHORT,              /* truncated L2/L3/L4 header */
  DP_EXC_FRAGMENT,           /* IP fragment or IPv6 fragment header */
  DP_EXC_OTHER_L4,           /* neither TCP nor UDP (ICMP, SCTP, ...) */
  DP_EXC_IPV6_EXTHDR,        /* IPv6 extension chain not followed */
  DP_EXC_UNKNOWN_IFINDEX,    /* hook on an interface that is no rail */
  DP_EXC_TARGET_UNAVAILABLE, /* decided rail disabled or without ifindex */
  DP_EXC_NO_GATEWAY,         /* decided rail has no gateway of this family */
  DP_EXC_REDIRECT_FAILED,    /* bpf_redirect_neigh refused; passed instead */
  DP_EXC_FLOW_TABLE_FULL,    /* flow insert failed; steered statelessly */
  DP_EXC_MAX,
};

/* dp_owned: HASH, ifindex -> enum dp_own_flags. What dualpath created on an
 * interface, kept in the kernel beside the pins so a restarted daemon or
 * `dualpathd --cleanup` removes exactly that and nothing else. */
enum dp_own_flags {
  DP_OWN_CLSACT = 1u << 0, /* the clsact qdisc was created by dualpath */
};

/*
 * Connect-time placement (the separate topology: each rail is its own network
 * and a peer has one address per rail). The cgroup sock_addr programs see a
 * classified connection being made toward a peer's address on one rail and,
 * when the class's decision puts this connection on another, rewrite the
 * destination to the same host on that rail's network: the host part of the
 * address is kept, the network is the target rail's.
 *
 * dp_rail_nets: ARRAY, key = rail slot. All in network byte order; a mask of
 * 0 means the rail has no network of that family.
 */
struct dp_rail_net {
  __u32 net4;
  __u32 mask4;
  __u32 net6[4];
  __u32 mask6[4];
};

/* dp_peers: HASH written by the daemon from the policy's [[peer]] table,
 * for fabrics whose hosts are not numbered alike on every rail (a /31 per
 * NIC port): one key per address a peer has, its value that peer's address
 * on every rail. Connect-time placement uses it before the host-part
 * mapping of dp_rail_nets; an address it does not hold is mapped by its
 * host part as before. Addresses in network byte order, IPv4 in addr[0].
 */
struct dp_peer_key {
  __u32 addr[4];
  __u16 family; /* AF_INET (2) or AF_INET6 (10) */
  __u16 pad;
};

struct dp_peer {
  __u32 addr[DP_MAX_RAILS][4]; /* the peer's address on each rail slot */
  __u8 has[DP_MAX_RAILS];      /* 1 where addr[slot] is set */
  __u8 rail;                   /* the rail slot of the key's address */
  __u8 pad[3];
};

#define DP_MAX_PEER_ADDRS 8192

/* dp_sock_orig: HASH (preallocated), key = socket cookie: the addresses an
 * application asked for and where they were placed, so that getpeername()
 * and recvmsg() give it back the address it connected or sent to. A connected
 * socket uses one entry; an unconnected UDP socket sending to several peers
 * keeps the newest DP_SOCK_PLACES. The cgroup/sock_release program removes a
 * socket's entry when it is closed. A full table places nothing more (the
 * address is left as the application gave it) until sockets close. */
#define DP_SOCK_ORIG_SIZE 65536
#define DP_SOCK_PLACES 4
struct dp_sock_place {
  __u32 placed[4]; /* IPv4 in [0], network byte order */
  __u32 orig[4];
  __u16 port;   /* network byte order */
  __u16 family; /* AF_INET or AF_INET6; 0 = unused */
};
struct dp_sock_orig {
  struct dp_sock_place p[DP_SOCK_PLACES];
  __u32 next; /* the entry the next placement takes */
  __u32 pad;
};

/* dp_connects: PERCPU_ARRAY, key = rail * DP_MAX_CLASSES + class: connections
 * (and unconnected UDP sends) placed. Row DP_MAX_RAILS counts those whose
 * destination no rail's network holds, or whose host part does not fit the
 * chosen rail's network: they are left alone, never broken. */
#define DP_CONNECT_UNMAPPED DP_MAX_RAILS

/*
 * Servers bound to one rail's address (the separate topology). Frameworks
 * bind their listeners to the address of the interface they are given
 * (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, an RPC server's --host), while a
 * peer's connect-time placement may send a connection to this node's address
 * on another rail. The sk_lookup program hands such a connection to the
 * listener that holds the same port on this node's address on another rail,
 * only when no listener holds the address and port asked for.
 *
 * dp_local_addrs: ARRAY, key = rail slot: this node's own address on each
 * rail (the policy's source and source6), network byte order; all zero in the
 * shared topology, where nothing is handed over.
 * dp_listeners: SOCKHASH, struct dp_listen_key -> a TCP listener or an
 * unconnected UDP socket bound to one of those addresses (sockops adds a
 * listener when it starts listening; the daemon adds UDP sockets through an
 * iterator, dp_udp_servers, after cgroup post_bind counted a bind to one of
 * the addresses in dp_udp_binds, and tc ingress the one a datagram in hand
 * is for; the kernel removes a socket when it closes).
 * dp_handovers: PERCPU_ARRAY, key = rail slot the connection was addressed
 * to: connections (and UDP peers) handed to a socket on another rail.
 * dp_bound: HASH, struct dp_listen_key -> socket cookie: every UDP socket
 * bound to one of those addresses, and every TCP or UDP socket bound to the
 * unspecified one (address 0), from bind (cgroup post_bind) to close
 * (sock_release), so that sk_lookup never overrides one, even before the
 * iterator has seen it.
 * dp_bound_by: HASH, socket cookie -> its dp_bound key (sock_release sees no
 * address).
 * dp_udp_handed: LRU_HASH, struct dp_udp_peer -> struct dp_udp_handed: a UDP
 * peer whose datagrams sk_lookup handed to a server bound to another rail's
 * address. The server's recvmsg() shows the peer on the server's own rail,
 * and its sendto() of that address goes back the way the datagrams came
 * (destination the peer's real address, source this node's address on the
 * rail they were addressed to), which a connected client requires. A
 * server's connect() to such a peer connects it to the real address, and tc
 * then rewrites the source of what it sends and the destination of what
 * comes in (lib/listen.h).
 */
#define DP_LISTENERS_SIZE 16384

/*
 * dp_syn_rails: LRU_HASH, flow key as the answer leaves (local side first)
 * -> the rail slot its SYN arrived on. Kept by tc ingress for rails with
 * DP_RAIL_F_MP_UP only (the shared topology, with a multipath class), so
 * that the SYN-ACK of a subflow the peer bound to one rail goes back on it:
 * the answering socket is a request socket, which records no arrival.
 */
#define DP_SYN_RAILS_SIZE 4096

/*
 * dp_police: ARRAY, key = rail slot. Reserves (dualpath-policy(5), a class's
 * "reserve"): while a class with a reserve is carried on the rail, the
 * classes in `classes` (those without one) are policed together there to
 * `rate`, so that the reserves stay free whatever the rail's qdisc serves
 * first. A token bucket of `burst` bytes refilled at `rate`; a packet that
 * finds too few tokens is dropped at egress, which TCP sees at once as a
 * local drop: it keeps the segment to send again and lowers its window (a
 * TCP socket's head segment is taken as lost instead: bpf/lib/tc.h).
 * Written by the daemon when it changes; rate 0: nothing is policed.
 */
struct dp_police {
  struct bpf_spin_lock lock;
  __u32 classes; /* bit per class slot */
  __u64 rate;    /* bytes per second; 0: off */
  __u64 burst;   /* bytes */
  __s64 tokens;  /* the datapath's: bytes x 1e9, below 0 on credit */
  __u64 last_ns; /* the datapath's: the last refill */
};
/* dp_police_drops: PERCPU_ARRAY, key = rail slot: what the policer dropped. */
struct dp_police_drops {
  __u64 packets;
  __u64 bytes;
};
/* dp_health: ARRAY, key = rail slot, written by the daemon only (no program
 * reads it): each rail's health as the daemon last settled it, so that a
 * restarted daemon starts from what the last one knew rather than from "up"
 * (a rail failed before the restart stays failed until evidence says it
 * forwards, and the classes it carried keep their way back). */
enum dp_health_state {
  DP_HEALTH_NONE = 0, /* never written */
  DP_HEALTH_UP,
  DP_HEALTH_SUSPECT,
  DP_HEALTH_DOWN,
  DP_HEALTH_HOLDDOWN,
  DP_HEALTH_RAMPING,
  DP_HEALTH_DRAINED,
};
enum dp_health_flags {
  DP_HEALTH_F_BFD_SEEN = 1u << 0, /* the rail's BFD session was up at least once */
};
struct dp_rail_health {
  __u32 state; /* enum dp_health_state */
  __u32 flags; /* enum dp_health_flags */
  __u64 key;   /* a hash of the rail's name, interface and BFD peer */
  /* per class slot: its share of the rail before the rail failed, in
   * DP_SHARE_SCALE units (what failback gives back) */
  __u16 former[DP_MAX_CLASSES];
};

struct dp_local_addr {
  __u32 addr4;
  __u32 addr6[4];
};

struct dp_listen_key {
  __u32 addr[4]; /* IPv4 in [0], network byte order */
  __u16 port;    /* host byte order */
  __u8 proto;    /* IPPROTO_TCP or IPPROTO_UDP */
  __u8 family;   /* AF_INET or AF_INET6 */
};

/* dp_joins: HASH, struct dp_listen_key -> class slot: a listener the daemon
 * opened on a rail's address for the joins of a multipath class's
 * connections accepted on another rail's (daemon/multipath.cpp). A join it
 * accepts is the daemon's socket, in the daemon's cgroup: sockops finds its
 * class here (bpf/lib/sockops.h). */
#define DP_JOINS_SIZE 1024

#define DP_UDP_HANDED_SIZE 16384
struct dp_udp_peer {
  __u32 addr[4]; /* the peer as the server sees it (on the server's rail) */
  __u16 lport;   /* the server's port, host byte order */
  __u16 rport;   /* the peer's port, host byte order */
  __u8 family;
  __u8 pad[3];
};
struct dp_udp_handed {
  __u32 real[4]; /* the peer's address its datagrams came from */
  __u32 here;    /* the rail slot they were addressed to */
  __u32 to;      /* the rail slot of the server's address */
};

#endif /* DUALPATH_ABI_H */

/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Every map of the dualpath datapath, once, for both sides:
 *
 *   X(name, type, max_entries, key, value)
 *
 * bpf/lib/maps.h defines each as a BTF map pinned by name
 * (LIBBPF_PIN_BY_NAME) under the instance's bpffs directory, so a restarted
 * daemon reuses them; daemon/kernel/bpf_skeleton.h gives each a typed
 * accessor of the same name (DpSkeleton::dp_flows() is a
 * Map<dp_flow_key, dp_flow>). A map added here needs no other line to be
 * loaded, pinned, adopted, upgraded and written from C++. The structs are
 * abi.h's; a change to one that backs a map bumps DP_LAYOUT_VERSION.
 */
#ifndef DUALPATH_MAPS_H
#define DUALPATH_MAPS_H

#include "dualpath/abi.h"

#ifdef DP_ABI_TEST_LAYOUT
#define DP_FLOW_TABLE_SIZE 32768 /* test-only layout (abi.h) */
#else
#define DP_FLOW_TABLE_SIZE 65536
#endif

/* clang-format off */
#define DP_MAPS(X)                                                                                \
	/* classification: port (per generation), mark, cgroup; the policy's config */             \
	X(dp_ports, BPF_MAP_TYPE_ARRAY, DP_GENERATIONS * DP_PORT_SPACE, __u32, struct dp_port_entry) \
	X(dp_marks, BPF_MAP_TYPE_HASH, DP_GENERATIONS * DP_MAX_CLASSES * 4, struct dp_mark_key,      \
	  struct dp_mark_val)                                                                       \
	X(dp_config, BPF_MAP_TYPE_ARRAY, 1, __u32, struct dp_config)                                \
	X(dp_mark_bits, BPF_MAP_TYPE_ARRAY, 1, __u32, struct dp_mark_bits)                          \
	X(dp_cgroups, BPF_MAP_TYPE_HASH, DP_GENERATIONS * DP_MAX_CLASSES * 16, struct dp_cgroup_key, \
	  struct dp_cgroup_val)                                                                     \
	X(dp_cgroup_cache, BPF_MAP_TYPE_LRU_HASH, DP_CGROUP_CACHE_SIZE, struct dp_cgroup_key,       \
	  struct dp_cgroup_val)                                                                     \
	X(dp_cgroup_gens, BPF_MAP_TYPE_ARRAY, 1, __u32, __u32)                                      \
	/* rails: gateways and flags, interfaces, names */                                          \
	X(dp_rails, BPF_MAP_TYPE_ARRAY, DP_MAX_RAILS, __u32, struct dp_rail)                        \
	X(dp_ifindex, BPF_MAP_TYPE_HASH, 64, __u32, struct dp_ifindex_val)                          \
	X(dp_rail_by_ifindex, BPF_MAP_TYPE_ARRAY, DP_IFINDEX_DIRECT, __u32, __u32)                  \
	X(dp_rail_names, BPF_MAP_TYPE_ARRAY, DP_MAX_RAILS, __u32, struct dp_slot_name)              \
	/* classes: the daemon's decisions, names, QoS and TCP settings */                          \
	X(dp_decisions, BPF_MAP_TYPE_ARRAY, DP_MAX_CLASSES, __u32, struct dp_decision)              \
	X(dp_class_names, BPF_MAP_TYPE_ARRAY, DP_MAX_CLASSES, __u32, struct dp_slot_name)           \
	X(dp_class_qos, BPF_MAP_TYPE_ARRAY, DP_MAX_CLASSES, __u32, struct dp_class_qos)             \
	X(dp_class_tcp, BPF_MAP_TYPE_ARRAY, DP_MAX_CLASSES, __u32, struct dp_class_tcp)             \
	/* the flow table, and flowcells and bursts over it */                                      \
	X(dp_flows, BPF_MAP_TYPE_LRU_HASH, DP_FLOW_TABLE_SIZE, struct dp_flow_key, struct dp_flow)  \
	X(dp_cells, BPF_MAP_TYPE_ARRAY, 1, __u32, struct dp_cell_cfg)                               \
	X(dp_vq, BPF_MAP_TYPE_ARRAY, 1, __u32, struct dp_vq)                                        \
	X(dp_plans, BPF_MAP_TYPE_HASH, DP_PLAN_TABLE_SIZE, struct dp_flow_key, struct dp_plan)      \
	/* counters, per CPU: per rail and class; exceptions with one extra row (rail index        \
	 * DP_MAX_RAILS) for hooks on an unknown ifindex */                                         \
	X(dp_counters, BPF_MAP_TYPE_PERCPU_ARRAY, DP_MAX_RAILS * DP_MAX_CLASSES, __u32,             \
	  struct dp_counters)                                                                       \
	X(dp_tcp, BPF_MAP_TYPE_PERCPU_ARRAY, DP_MAX_RAILS * DP_MAX_CLASSES, __u32,                  \
	  struct dp_tcp_stats)                                                                      \
	X(dp_exceptions, BPF_MAP_TYPE_PERCPU_ARRAY, (DP_MAX_RAILS + 1) * DP_EXC_MAX, __u32, __u64)  \
	/* ownership records for the daemon; not used by the programs */                           \
	X(dp_owned, BPF_MAP_TYPE_HASH, 64, __u32, __u32)                                            \
	/* connect-time placement: rail networks, the peer table, each socket's address asked     \
	 * for, connections placed per rail and class */                                            \
	X(dp_rail_nets, BPF_MAP_TYPE_ARRAY, DP_MAX_RAILS, __u32, struct dp_rail_net)                \
	X(dp_peers, BPF_MAP_TYPE_HASH, DP_MAX_PEER_ADDRS, struct dp_peer_key, struct dp_peer)       \
	X(dp_sock_orig, BPF_MAP_TYPE_HASH, DP_SOCK_ORIG_SIZE, __u64, struct dp_sock_orig)           \
	X(dp_connects, BPF_MAP_TYPE_PERCPU_ARRAY, (DP_MAX_RAILS + 1) * DP_MAX_CLASSES, __u32,       \
	  __u64)                                                                                    \
	/* servers bound to one rail's address: this node's rail addresses, listeners, handovers  \
	 * per rail, and sk_lookup -> sockops: the connections handed over, by the flow key       \
	 * sockops builds for the accepted socket (local side first), valued by the rail slot of  \
	 * the listener it went to */                                                               \
	X(dp_local_addrs, BPF_MAP_TYPE_ARRAY, DP_MAX_RAILS, __u32, struct dp_local_addr)            \
	X(dp_listeners, BPF_MAP_TYPE_SOCKHASH, DP_LISTENERS_SIZE, struct dp_listen_key, __u64)      \
	X(dp_handovers, BPF_MAP_TYPE_PERCPU_ARRAY, DP_MAX_RAILS, __u32, __u64)                      \
	X(dp_handed, BPF_MAP_TYPE_LRU_HASH, DP_LISTENERS_SIZE, struct dp_flow_key, __u32)           \
	/* the daemon's join listeners (multipath classes): address and port -> class slot */     \
	X(dp_joins, BPF_MAP_TYPE_HASH, DP_JOINS_SIZE, struct dp_listen_key, __u32)                  \
	/* UDP servers bound to one rail's address: binds counted, peers handed over */             \
	X(dp_udp_binds, BPF_MAP_TYPE_ARRAY, 1, __u32, __u64)                                        \
	X(dp_bound, BPF_MAP_TYPE_HASH, DP_LISTENERS_SIZE, struct dp_listen_key, __u64)              \
	X(dp_bound_by, BPF_MAP_TYPE_HASH, DP_LISTENERS_SIZE, __u64, struct dp_listen_key)           \
	X(dp_udp_handed, BPF_MAP_TYPE_LRU_HASH, DP_UDP_HANDED_SIZE, struct dp_udp_peer,            \
	  struct dp_udp_handed)                                                                     \
	/* multipath classes in the shared topology: the rail each TCP SYN arrived on */         \
	X(dp_syn_rails, BPF_MAP_TYPE_LRU_HASH, DP_SYN_RAILS_SIZE, struct dp_flow_key, __u32)        \
	/* reserves: the classes policed on each rail, and what was dropped */                  \
	X(dp_police, BPF_MAP_TYPE_ARRAY, DP_MAX_RAILS, __u32, struct dp_police)                     \
	X(dp_police_drops, BPF_MAP_TYPE_PERCPU_ARRAY, DP_MAX_RAILS, __u32, struct dp_police_drops)  \
	/* each rail's health as the daemon last settled it (a restart starts from it) */          \
	X(dp_health, BPF_MAP_TYPE_ARRAY, DP_MAX_RAILS, __u32, struct dp_rail_health)                \
	/* the layout version of these maps (abi.h); its own definition never changes */           \
	X(dp_abi, BPF_MAP_TYPE_ARRAY, 1, __u32, struct dp_abi)
/* clang-format on */

#endif /* DUALPATH_MAPS_H */

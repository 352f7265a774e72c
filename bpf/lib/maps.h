/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every map of the dualpath datapath. All are pinned by name under the
 * instance's bpffs directory (libbpf pin_root_path), so a restarted daemon
 * reuses them: counters, flows and decisions survive a restart. */
#ifndef DP_BPF_MAPS_H
#define DP_BPF_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "dualpath/abi.h"

#ifdef DP_ABI_TEST_LAYOUT
#define DP_FLOW_TABLE_SIZE 32768 /* test-only layout (abi.h) */
#else
#define DP_FLOW_TABLE_SIZE 65536
#endif

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_GENERATIONS *DP_PORT_SPACE);
	__type(key, __u32);
	__type(value, struct dp_port_entry);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_GENERATIONS *DP_MAX_CLASSES * 4);
	__type(key, struct dp_mark_key);
	__type(value, struct dp_mark_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_marks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_config);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_MAX_RAILS);
	__type(key, __u32);
	__type(value, struct dp_rail);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_rails SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct dp_ifindex_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_ifindex SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_IFINDEX_DIRECT);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_rail_by_ifindex SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct dp_decision);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_decisions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct dp_slot_name);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_class_names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct dp_class_qos);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_class_qos SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_MAX_RAILS);
	__type(key, __u32);
	__type(value, struct dp_slot_name);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_rail_names SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DP_FLOW_TABLE_SIZE);
	__type(key, struct dp_flow_key);
	__type(value, struct dp_flow);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_MAX_RAILS *DP_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct dp_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_MAX_RAILS *DP_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct dp_tcp_stats);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_tcp SEC(".maps");

/* One extra row (rail index DP_MAX_RAILS) for hooks on an unknown ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, (DP_MAX_RAILS + 1) * DP_EXC_MAX);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_exceptions SEC(".maps");

/* Not used by the programs: ownership records for the daemon (abi.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_owned SEC(".maps");

/* Connect-time placement (abi.h) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_MAX_RAILS);
	__type(key, __u32);
	__type(value, struct dp_rail_net);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_rail_nets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_MAX_PEER_ADDRS);
	__type(key, struct dp_peer_key);
	__type(value, struct dp_peer);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_SOCK_ORIG_SIZE);
	__type(key, __u64);
	__type(value, struct dp_sock_orig);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_sock_orig SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, (DP_MAX_RAILS + 1) * DP_MAX_CLASSES);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_connects SEC(".maps");

/* Classes by cgroup (abi.h) */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_GENERATIONS *DP_MAX_CLASSES * 16);
	__type(key, struct dp_cgroup_key);
	__type(value, struct dp_cgroup_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DP_CGROUP_CACHE_SIZE);
	__type(key, struct dp_cgroup_key);
	__type(value, struct dp_cgroup_val);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_cgroup_cache SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_cgroup_gens SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_mark_bits);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_mark_bits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_MAX_CLASSES);
	__type(key, __u32);
	__type(value, struct dp_class_tcp);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_class_tcp SEC(".maps");

/* Flowcells (abi.h) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_cell_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_cells SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_vq);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_vq SEC(".maps");

/* dp_plans: where each planned flow's next burst goes (abi.h, dp_plan). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, DP_PLAN_TABLE_SIZE);
	__type(key, struct dp_flow_key);
	__type(value, struct dp_plan);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_plans SEC(".maps");

/* Servers bound to one rail's address (abi.h, dp_listen_key). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, DP_MAX_RAILS);
	__type(key, __u32);
	__type(value, struct dp_local_addr);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_local_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, DP_LISTENERS_SIZE);
	__type(key, struct dp_listen_key);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_listeners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, DP_MAX_RAILS);
	__type(key, __u32);
	__type(value, __u64);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_handovers SEC(".maps");

/* sk_lookup -> sockops: the connections handed over, by the flow key sockops
 * builds for the accepted socket (local side first); value: the rail slot of
 * the listener it went to. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, DP_LISTENERS_SIZE);
	__type(key, struct dp_flow_key);
	__type(value, __u32);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_handed SEC(".maps");

/* dp_abi: the layout version of these maps (abi.h). Never changes. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dp_abi);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} dp_abi SEC(".maps");

#endif /* DP_BPF_MAPS_H */

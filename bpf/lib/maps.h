/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Every map of the dualpath datapath, defined from the one list that C++
 * shares (include/dualpath/maps.h). All are pinned by name under the
 * instance's bpffs directory (libbpf pin_root_path), so a restarted daemon
 * reuses them: counters, flows and decisions survive a restart.
 *
 * Each entry file (bpf/dp_*.bpf.c) includes this header and so defines every
 * map; the definitions are weak, and bpftool's static linker (gen object)
 * keeps one of each in the linked object, so all programs share one map. */
#ifndef DP_BPF_MAPS_H
#define DP_BPF_MAPS_H

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "dualpath/maps.h"

#define DP_BPF_MAP(name_, type_, max_, key_, value_)                                               \
	struct {                                                                                   \
		__uint(type, type_);                                                               \
		__uint(max_entries, max_);                                                         \
		__type(key, key_);                                                                 \
		__type(value, value_);                                                             \
		__uint(pinning, LIBBPF_PIN_BY_NAME);                                               \
	} name_ __weak SEC(".maps");

DP_MAPS(DP_BPF_MAP)

#endif /* DP_BPF_MAPS_H */

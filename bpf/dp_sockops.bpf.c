// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/* sockops on the policy's cgroup (lib/sockops.h): per-rail TCP measurement,
 * the class's minimum RTO, listeners noted for the sk_lookup handover. */
#include "lib/sockops.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

SEC("sockops")
int dp_sockops(struct bpf_sock_ops *skops)
{
	return dp_sockops_run(skops);
}

/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/* Loads from a program's context (bpf_sock_ops, bpf_sk_lookup, bpf_sock_addr)
 * that the verifier accepts. */
#ifndef DP_BPF_CTX_H
#define DP_BPF_CTX_H

#include <linux/types.h>

/* Loads a context field inside its branch: without the barrier clang may
 * merge loads of different fields into one load through ctx + offset, which
 * the verifier refuses ("dereference of modified ctx ptr"). */
#define DP_CTX_LOAD(dst, field)                                                                    \
	do {                                                                                       \
		(dst) = (field);                                                                   \
		asm volatile("" : "+r"(dst));                                                      \
	} while (0)

/* The four words of an IPv6 context field, each loaded on its own. */
#define DP_CTX_LOAD_IP6(dst, field)                                                                \
	do {                                                                                       \
		__u32 w_;                                                                          \
		for (int i_ = 0; i_ < 4; i_++) {                                                   \
			DP_CTX_LOAD(w_, (field)[i_]);                                              \
			(dst)[i_] = w_;                                                            \
		}                                                                                  \
	} while (0)

#endif /* DP_BPF_CTX_H */

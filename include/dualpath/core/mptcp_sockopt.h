// SPDX-License-Identifier: Apache-2.0
// What a socket says about its MPTCP state, numbered as the kernel's uapi
// headers number it: glibc's <netinet/tcp.h> lacks TCP_IS_MPTCP, and
// <linux/tcp.h> cannot be included beside it (both define struct tcphdr).
// SOL_MPTCP and IPPROTO_MPTCP come from glibc (2.32 and later).
#pragma once

#include <cstdint>

namespace dp::mptcp {

// getsockopt(SOL_TCP, TCP_IS_MPTCP) (Linux 5.16): 1 on an MPTCP socket that
// did not fall back to TCP, 0 on a TCP socket or one that fell back
inline constexpr int kTcpIsMptcp = 43;
// getsockopt(SOL_MPTCP, MPTCP_INFO) (<linux/mptcp.h>): struct mptcp_info;
// refused on a socket that fell back to TCP (Linux 6.x)
inline constexpr int kMptcpInfo = 1;
// mptcp_info.flags: MPTCP_INFO_FLAG_FALLBACK
inline constexpr uint32_t kInfoFlagFallback = 1;

}  // namespace dp::mptcp

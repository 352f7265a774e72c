// SPDX-License-Identifier: Apache-2.0
// Parsing of the units a policy uses: bandwidth ("200Gbit") and durations
// ("500ms", "5m"). Pure functions; errors are sentences for the user.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "dualpath/core/result.h"

namespace dp {

// Bits per second. Accepts bit, Kbit, Mbit, Gbit, Tbit (SI, case-insensitive
// prefix), with an integer or decimal number: "200Gbit", "2.5Gbit".
Result<uint64_t> parse_bandwidth(std::string_view text);

// Accepts ns, us, ms, s, m, h with an integer or decimal number: "0.5ms".
Result<std::chrono::nanoseconds> parse_duration(std::string_view text);

// Bytes: B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB (of 1024), or a
// bare integer: "256KiB", "1MB", "4096". At most 1 TiB.
Result<uint64_t> parse_size(std::string_view text);

// "1.25 Gbit/s", "250 Mbit/s"
std::string format_bandwidth(double bits_per_second);
// "500ms", "5m", "200us"
std::string format_duration(std::chrono::nanoseconds d);
// "1.2 GB", "512 B"
std::string format_bytes(double bytes);

}  // namespace dp

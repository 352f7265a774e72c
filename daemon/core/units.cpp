// SPDX-License-Identifier: Apache-2.0
#include "dualpath/core/units.h"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <utility>

namespace dp {
namespace {

struct Split {
  double number = 0;
  std::string unit;
};

Result<Split> split_number(std::string_view text, std::string_view what) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0)
    return DP_ERROR("{} \"{}\" must start with a number, as in {}", what, text,
                    what == "bandwidth" ? "\"200Gbit\""
                    : what == "size"    ? "\"256KiB\""
                                        : "\"500ms\"");
  Split s;
  auto [p, ec] = std::from_chars(text.data(), text.data() + i, s.number);
  if (ec != std::errc() || p != text.data() + i)
    return DP_ERROR("{} \"{}\" has a malformed number", what, text);
  std::string_view rest = text.substr(i);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  s.unit = std::string(rest);
  return s;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<uint64_t> parse_bandwidth(std::string_view text) {
  auto s = split_number(text, "bandwidth");
  if (!s) return s.error();
  std::string u = lower(s->unit);
  static constexpr std::array<std::pair<std::string_view, double>, 10> units{{
      {"bit", 1},
      {"kbit", 1e3},
      {"mbit", 1e6},
      {"gbit", 1e9},
      {"tbit", 1e12},
      {"bit/s", 1},
      {"kbit/s", 1e3},
      {"mbit/s", 1e6},
      {"gbit/s", 1e9},
      {"tbit/s", 1e12},
  }};
  if (u.empty())
    return DP_ERROR("bandwidth \"{}\" has no unit: write it as bits per second, e.g. \"{}Gbit\"",
                    text, s->number);
  if (u.size() > 3 && u.substr(u.size() - 3) == "bps")
    return DP_ERROR(
        "bandwidth \"{}\" is ambiguous (tc reads \"bps\" as bytes, others as bits): use "
        "bit, Kbit, Mbit, Gbit or Tbit",
        text);
  for (auto& [name, mult] : units) {
    if (u == name) {
      double v = s->number * mult;
      if (v < 1 || v > 1e15)
        return DP_ERROR("bandwidth \"{}\" is out of range (1bit to 1000Tbit)", text);
      return static_cast<uint64_t>(std::llround(v));
    }
  }
  return DP_ERROR("bandwidth \"{}\" has an unknown unit \"{}\": use bit, Kbit, Mbit, Gbit or Tbit",
                  text, s->unit);
}

Result<uint64_t> parse_size(std::string_view text) {
  auto s = split_number(text, "size");
  if (!s) return s.error();
  static constexpr std::array<std::pair<std::string_view, double>, 8> units{{
      {"", 1},
      {"b", 1},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"kib", 1024.0},
      {"mib", 1024.0 * 1024},
      {"gib", 1024.0 * 1024 * 1024},
  }};
  std::string u = lower(s->unit);
  for (auto& [name, mult] : units) {
    if (u != name) continue;
    double v = s->number * mult;
    if (v != std::floor(v)) return DP_ERROR("size \"{}\" is not a whole number of bytes", text);
    if (v > 1099511627776.0) return DP_ERROR("size \"{}\" is out of range (at most 1TiB)", text);
    return static_cast<uint64_t>(v);
  }
  return DP_ERROR("size \"{}\" has an unknown unit \"{}\": use B, KB, MB, GB, KiB, MiB or GiB",
                  text, s->unit);
}

Result<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  auto s = split_number(text, "duration");
  if (!s) return s.error();
  static constexpr std::array<std::pair<std::string_view, double>, 6> units{{
      {"ns", 1},
      {"us", 1e3},
      {"ms", 1e6},
      {"s", 1e9},
      {"m", 60e9},
      {"h", 3600e9},
  }};
  if (s->unit.empty())
    return DP_ERROR("duration \"{}\" has no unit: use ns, us, ms, s, m or h, e.g. \"{}ms\"", text,
                    s->number);
  for (auto& [name, mult] : units) {
    if (s->unit == name) {
      double v = s->number * mult;
      if (v > 1e9 * 86400 * 365)
        return DP_ERROR("duration \"{}\" is out of range (at most a year)", text);
      return std::chrono::nanoseconds(static_cast<int64_t>(std::llround(v)));
    }
  }
  return DP_ERROR("duration \"{}\" has an unknown unit \"{}\": use ns, us, ms, s, m or h", text,
                  s->unit);
}

std::string format_bandwidth(double bps) {
  static constexpr std::array<std::pair<double, std::string_view>, 4> steps{{
      {1e12, "Tbit/s"},
      {1e9, "Gbit/s"},
      {1e6, "Mbit/s"},
      {1e3, "Kbit/s"},
  }};
  for (auto& [div, name] : steps)
    if (std::fabs(bps) >= div) return fmt::format("{:.3g} {}", bps / div, name);
  return fmt::format("{:.0f} bit/s", bps);
}

std::string format_duration(std::chrono::nanoseconds d) {
  int64_t ns = d.count();
  if (ns != 0 && ns % 3'600'000'000'000 == 0) return fmt::format("{}h", ns / 3'600'000'000'000);
  if (ns != 0 && ns % 60'000'000'000 == 0) return fmt::format("{}m", ns / 60'000'000'000);
  if (ns != 0 && ns % 1'000'000'000 == 0) return fmt::format("{}s", ns / 1'000'000'000);
  if (ns != 0 && ns % 1'000'000 == 0) return fmt::format("{}ms", ns / 1'000'000);
  if (ns >= 1'000'000) return fmt::format("{:g}ms", static_cast<double>(ns) / 1e6);
  if (ns != 0 && ns % 1'000 == 0) return fmt::format("{}us", ns / 1'000);
  return fmt::format("{}ns", ns);
}

std::string format_bytes(double bytes) {
  static constexpr std::array<std::pair<double, std::string_view>, 4> steps{{
      {1e12, "TB"},
      {1e9, "GB"},
      {1e6, "MB"},
      {1e3, "kB"},
  }};
  for (auto& [div, name] : steps)
    if (bytes >= div) return fmt::format("{:.3g} {}", bytes / div, name);
  return fmt::format("{:.0f} B", bytes);
}

}  // namespace dp

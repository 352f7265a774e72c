// SPDX-License-Identifier: Apache-2.0
// The Checker: refusals with file:line, and the generic reader of declared
// keys, each type with its refusal and the key's hint.
#include <arpa/inet.h>

#include <algorithm>
#include <cmath>

#include "dualpath/core/units.h"
#include "policy_checker.h"

namespace dp::policy_parts {

void Checker::error(const toml::source_region& at, std::string msg) {
  errors_.push_back({at.path && !at.path->empty() ? *at.path : file_,
                     static_cast<int>(at.begin.line), static_cast<int>(at.begin.column),
                     std::move(msg)});
}

void Checker::only_keys(const toml::table& t, const std::vector<std::string_view>& allowed,
                        std::string_view section, const std::vector<std::string_view>& arrays) {
  const bool top = section == "the top level";
  auto shown = [&](std::string_view a) {
    if (!top) return "\"" + std::string(a) + "\"";
    bool array = std::find(arrays.begin(), arrays.end(), a) != arrays.end();
    return array ? fmt::format("[[{}]]", a) : fmt::format("[{}]", a);
  };
  std::vector<std::string> names(allowed.begin(), allowed.end());
  for (auto& [k, v] : t) {
    if (std::find(allowed.begin(), allowed.end(), k.str()) != allowed.end()) continue;
    auto near = nearest_name(k.str(), names);
    error(k.source().begin.line ? k.source() : v.source(),
          fmt::format("unknown key \"{}\" in {}{} (allowed: {})", k.str(), section,
                      near ? fmt::format("; did you mean {}?", shown(*near)) : "",
                      fmt::join(allowed, ", ")));
    unknown_.emplace_back(k.str());
  }
}

bool Checker::refused_like(std::string_view name) const {
  for (const auto& u : unknown_)
    if (nearest_name(u, {std::string(name)})) return true;
  return false;
}

void Checker::read_keys(const toml::table& t, const schema::Section& s, std::string_view label,
                        schema::Target& target, std::initializer_list<std::string_view> except) {
  for (const auto& k : s.keys) {
    if (!k.set || std::find(except.begin(), except.end(), k.name) != except.end()) continue;
    if (auto v = read(t, k, label)) k.set(target, *v);
  }
}

std::optional<schema::Value> Checker::read(const toml::table& t, const schema::Key& k,
                                           std::string_view label) {
  using namespace schema;
  std::optional<Value> v;
  std::visit(
      [&](const auto& type) {
        using T = std::decay_t<decltype(type)>;
        if constexpr (std::is_same_v<T, Boolean>) {
          if (auto b = boolean(t, k.name, label)) v = *b;
        } else if constexpr (std::is_same_v<T, Integer>) {
          if (auto i = integer(t, k.name, label, k.required, type.lo, type.hi)) v = *i;
        } else if constexpr (std::is_same_v<T, Number>) {
          if (auto d = number(t, k.name, label, type.above, type.at_most)) v = *d;
        } else if constexpr (std::is_same_v<T, Duration>) {
          if (auto d = duration(t, k.name, label, type, k.hint)) v = *d;
        } else if constexpr (std::is_same_v<T, Text>) {
          if (auto s = string(t, k.name, label, k.required)) v = *s;
        } else if constexpr (std::is_same_v<T, Word>) {
          if (auto w = word(t, k.name, label, k.required, type.words, k.hint))
            v = static_cast<int64_t>(*w);
        } else if constexpr (std::is_same_v<T, Address>) {
          if (auto a = address(t, k.name, label, type.family)) v = *a;
        }
      },
      k.type);
  if (v && k.check)
    if (std::string problem = k.check(*v, label); !problem.empty()) {
      error(where(t, k.name), std::move(problem));
      return std::nullopt;
    }
  return v;
}

std::optional<std::string> Checker::string(const toml::table& t, std::string_view key,
                                           std::string_view section, bool required) {
  const toml::node* n = t.get(key);
  if (!n) {
    if (required) error(t, fmt::format("{} is missing the required key \"{}\"", section, key));
    return std::nullopt;
  }
  if (auto s = n->as_string()) return s->get();
  error(*n, fmt::format("\"{}\" in {} must be a string", key, section));
  return std::nullopt;
}

// One of a key's words: refused, naming every word, when it is none of them
// ("KEY in SECTION must be "a", "b" or "c", not "x"", then `why`, which
// says what the words mean where that helps).
std::optional<size_t> Checker::word(const toml::table& t, std::string_view key,
                                    std::string_view section, bool required,
                                    const std::vector<std::string_view>& words,
                                    std::string_view why) {
  auto v = string(t, key, section, required);
  if (!v) return std::nullopt;
  std::string all;
  for (size_t i = 0; i < words.size(); ++i) {
    if (*v == words[i]) return i;
    all += i == 0 ? "" : i + 1 == words.size() ? " or " : ", ";
    all += fmt::format("\"{}\"", words[i]);
  }
  error(*t.get(key), fmt::format("{} in {} must be {}, not \"{}\"{}", key, section, all, *v, why));
  return std::nullopt;
}

std::optional<bool> Checker::boolean(const toml::table& t, std::string_view key,
                                     std::string_view section) {
  const toml::node* n = t.get(key);
  if (!n) return std::nullopt;
  if (auto b = n->as_boolean()) return b->get();
  error(*n, fmt::format("{} in {} must be true or false", key, section));
  return std::nullopt;
}

std::optional<int64_t> Checker::integer(const toml::table& t, std::string_view key,
                                        std::string_view section, bool required, int64_t lo,
                                        int64_t hi) {
  const toml::node* n = t.get(key);
  if (!n) {
    if (required) error(t, fmt::format("{} is missing the required key \"{}\"", section, key));
    return std::nullopt;
  }
  auto i = n->as_integer();
  if (!i) {
    error(*n, fmt::format("\"{}\" in {} must be an integer", key, section));
    return std::nullopt;
  }
  if (i->get() < lo || i->get() > hi) {
    error(*n, fmt::format("\"{}\" = {} in {} is out of range ({} to {})", key, i->get(), section,
                          lo, hi));
    return std::nullopt;
  }
  return i->get();
}

std::optional<double> Checker::number(const toml::table& t, std::string_view key,
                                      std::string_view section, double above, double at_most) {
  const toml::node* n = t.get(key);
  if (!n) return std::nullopt;
  std::optional<double> v;
  if (auto f = n->as_floating_point()) v = f->get();
  if (auto i = n->as_integer()) v = static_cast<double>(i->get());
  if (!v) {
    error(*n, fmt::format("\"{}\" in {} must be a number", key, section));
    return std::nullopt;
  }
  if (!std::isfinite(*v) || *v <= above || *v > at_most) {
    error(*n, fmt::format("\"{}\" = {} in {} must be above {} and at most {}", key, *v, section,
                          above, at_most));
    return std::nullopt;
  }
  return v;
}

std::optional<std::chrono::nanoseconds> Checker::duration(const toml::table& t,
                                                          std::string_view key,
                                                          std::string_view section,
                                                          const schema::Duration& range,
                                                          std::string_view why) {
  const toml::node* n = t.get(key);
  if (!n) return std::nullopt;
  if (!n->is_string()) {
    error(*n, fmt::format("\"{}\" in {} must be a duration string with its unit, such as "
                          "\"500ms\", \"30s\" or \"5m\"{}",
                          key, section,
                          n->is_number() ? fmt::format(" (not the bare number {})",
                                                       n->value<double>().value_or(0))
                                         : ""));
    return std::nullopt;
  }
  auto d = parse_duration(n->as_string()->get());
  if (!d) {
    error(*n, fmt::format("\"{}\" in {}: {}", key, section, d.error().message));
    return std::nullopt;
  }
  if (*d < range.min) {
    error(*n, fmt::format("\"{}\" in {} must be at least {}", key, section,
                          format_duration(range.min)));
    return std::nullopt;
  }
  if (*d > range.max) {
    error(*n, fmt::format("\"{}\" in {} must be at most {}{}", key, section,
                          format_duration(range.max), why));
    return std::nullopt;
  }
  return *d;
}

std::optional<IpAddr> Checker::address(const toml::table& t, std::string_view key,
                                       std::string_view section, int family) {
  auto s = string(t, key, section, false);
  if (!s) return std::nullopt;
  auto a = IpAddr::parse(*s);
  if (!a || (family && a->family != family)) {
    error(*t.get(key), fmt::format("\"{}\" in {} must be an {} address, not \"{}\"", key, section,
                                   family == AF_INET    ? "IPv4"
                                   : family == AF_INET6 ? "IPv6"
                                                        : "IP",
                                   *s));
    return std::nullopt;
  }
  return a;
}

const toml::node& where(const toml::table& t, std::string_view key) {
  const toml::node* n = t.get(key);
  return n ? *n : static_cast<const toml::node&>(t);
}

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char ch : s)
    out += ch < 0x20 || ch == 0x7f ? fmt::format("\\x{:02x}", ch)
                                   : std::string(1, static_cast<char>(ch));
  return out;
}

}  // namespace dp::policy_parts

// SPDX-License-Identifier: Apache-2.0
// What every object's commands share: output, errors and requests.
#include <algorithm>
#include <iostream>

#include "dpctl.h"

namespace dpctl {

void print_json(const Globals& g, const json& j) {
  std::cout << (g.pretty ? j.dump(2) : j.dump()) << "\n";
}

// Errors: {"error": ...} on stdout under -j, a sentence on stderr otherwise.
int fail(const Globals& g, const std::string& message, const json& extra) {
  if (g.json_out) {
    json j{{"error", message}};
    if (!extra.is_null()) j["details"] = extra;
    print_json(g, j);
  } else {
    std::cerr << "dpctl: " << message << "\n";
  }
  return 1;
}

std::string str(const json& j) {
  if (j.is_null()) return "-";
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

std::string shares_text(const json& shares, bool skip_zero, std::string_view sep,
                        std::string_view between) {
  std::string out;
  if (!shares.is_object()) return out;
  for (auto& [rail, share] : shares.items())
    if (!skip_zero || share.get<double>() > 0)
      out +=
          fmt::format("{}{}{}{:.0f}%", out.empty() ? "" : sep, rail, between, share.get<double>());
  return out;
}

// Sends a request; prints the error reply and returns nullopt on failure.
std::optional<json> request(const Globals& g, const std::string& cmd, json args, int* rc) {
  auto r = dp::call(g.socket, json{{"cmd", cmd}, {"args", std::move(args)}});
  if (!r) {
    fail(g, r.error().what());
    *rc = kExitUnreachable;
    return std::nullopt;
  }
  if (!(*r).value("ok", false)) {
    auto err = (*r)["error"];
    *rc = fail(g, err.value("message", "request failed"), err);
    return std::nullopt;
  }
  *rc = 0;
  return (*r)["data"];
}

// Column-aligned table.
void print_table(const std::vector<std::string>& head,
                 const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> w(head.size());
  for (size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  for (auto& r : rows)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
  auto line = [&](const std::vector<std::string>& r) {
    std::string s;
    for (size_t i = 0; i < r.size(); ++i) {
      s += r[i];
      if (i + 1 < r.size()) s += std::string(w[i] - r[i].size() + 2, ' ');
    }
    std::cout << s << "\n";
  };
  line(head);
  for (auto& r : rows) line(r);
}

}  // namespace dpctl

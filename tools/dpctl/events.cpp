// SPDX-License-Identifier: Apache-2.0
// dpctl events [--follow] [--since N]
#include <iostream>
#include <thread>

#include "dpctl.h"

namespace dpctl {

void print_event(const json& e) {
  auto shares = [](const json& s) {
    std::string out = shares_text(s, true, ", ", " ");
    return out.empty() ? std::string("none") : out;
  };
  if (e["class"].is_null()) {  // a path's health
    std::cout << str(e["time"]) << "  " << (e["path"].is_null() ? "node" : str(e["path"])) << "  "
              << str(e["kind"]) << "\n    " << str(e["reason"]) << "\n";
    return;
  }
  std::cout << str(e["time"]) << "  " << str(e["class"]) << "  " << str(e["kind"]) << "  "
            << shares(e["before"]) << " -> " << shares(e["after"]) << "\n    " << str(e["reason"])
            << "\n";
}

namespace {

int cmd_events(const Globals& g, bool follow, uint64_t since) {
  for (;;) {
    int rc;
    auto d = request(g, "events", {{"since", since}}, &rc);
    if (!d) return rc;
    if (g.json_out && !follow) return print_json(g, *d), 0;
    for (auto& e : (*d)["events"]) {
      if (g.json_out)
        std::cout << e.dump() << "\n";
      else
        print_event(e);
      since = std::max<uint64_t>(since, e["seq"].get<uint64_t>());
    }
    std::cout.flush();
    if (!follow) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

void add_events(CLI::App& app, const Globals& g, Action& action) {
  struct Opts {
    bool follow = false;
    uint64_t since = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* events = app.add_subcommand("events", "the scheduler's decisions, with their reasons");
  events->add_flag("-f,--follow", o->follow, "keep printing new events");
  events->add_option("--since", o->since, "only events after this number");
  events->callback(
      [&g, &action, o] { action = [&g, o] { return cmd_events(g, o->follow, o->since); }; });
}

}  // namespace dpctl

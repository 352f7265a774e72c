// SPDX-License-Identifier: Apache-2.0
// dpctl: operate dualpathd.  dpctl [-j] [-p] [--socket PATH] OBJECT COMMAND [ARGS]
//
// The objects, each in its own file (dpctl.h): this file is their table, the
// global options, the words' expansion (prefixes, help at every level) and
// the completion that walks the same tree.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <iostream>

#include "dpctl.h"
#include "dualpath/core/cluster.h"
#include "dualpath/version.h"

namespace {

using namespace dpctl;

// The objects, in the order of dpctl --help.
constexpr void (*kObjects[])(CLI::App&, const Globals&, Action&) = {
    add_status, add_path,   add_class,  add_flow,       add_run,
    add_budget, add_events, add_policy, add_diagnostics};

// The words naming an object and a command, as ip(8) takes them: a prefix
// stands for the one word it begins ("dpctl pa l" is "dpctl path list"); a
// prefix of several words is refused with them ("dpctl e": env or events?);
// a word that is no command's is named, with the nearest one. "help" at any
// level, and an object without its command ("dpctl path"), show that level's
// help. Returns an error message, or "" with argv's words expanded.
std::string expand_commands(CLI::App& app, std::vector<std::string>& args) {
  CLI::App* level = &app;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") break;
    if (a == "-s" || a == "--socket") {
      ++i;  // its value
      continue;
    }
    if (!a.empty() && a[0] == '-') continue;
    auto subs = level->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty()) break;  // an argument, not a command
    if (a == "help" && std::none_of(subs.begin(), subs.end(),
                                    [](CLI::App* sc) { return sc->get_name() == "help"; })) {
      args[i] = "--help";
      return "";
    }
    std::vector<CLI::App*> hits;
    for (auto* sc : subs) {
      if (sc->get_name() == a) {
        hits = {sc};
        break;
      }
      if (sc->get_name().rfind(a, 0) == 0) hits.push_back(sc);
    }
    std::string where = level == &app ? "" : level->get_name() + " ";
    if (hits.size() == 1) {
      args[i] = hits[0]->get_name();
      level = hits[0];
      continue;
    }
    std::string names;
    if (hits.size() > 1) {
      for (auto* sc : hits) names += (names.empty() ? "" : ", ") + where + sc->get_name();
      return fmt::format("\"{}{}\" is ambiguous: {}", where, a, names);
    }
    std::string nearest;
    size_t best = SIZE_MAX;
    for (auto* sc : subs) {
      names += (names.empty() ? "" : ", ") + sc->get_name();
      size_t dist = dp::edit_distance(a, sc->get_name());
      if (dist < best) best = dist, nearest = sc->get_name();
    }
    return fmt::format("no command \"{}{}\"{}; the commands{} are {}", where, a,
                       best <= 2 ? fmt::format(" (did you mean \"{}{}\"?)", where, nearest) : "",
                       where.empty() ? "" : " of " + level->get_name(), names);
  }
  // an object named without its command: its help, as for "help"
  if (level != &app && !level->get_subcommands([](CLI::App*) { return true; }).empty() &&
      std::none_of(args.begin(), args.end(),
                   [](const std::string& a) { return a == "-h" || a == "--help"; }))
    args.insert(args.begin() + static_cast<long>(std::min(i, args.size())), "--help");
  return "";
}

// dpctl __complete WORD... CUR: the words that may follow WORD... and begin
// with CUR, one per line, for the bash completion (tools/completion/dpctl).
// "@file" and "@dir" ask the shell for file names. Values named by their
// type (a CLASS, a PATH, a NODE) come from the running daemon or from the
// description on the line.
int complete(CLI::App& app, const Globals& g, std::vector<std::string> words) {
  std::string cur = words.empty() ? "" : words.back();
  if (!words.empty()) words.pop_back();
  CLI::App* level = &app;
  const CLI::Option* wants = nullptr;  // an option whose value comes next
  size_t positionals = 0;
  std::string description;  // a .toml on the line, for NODE
  for (const auto& w : words) {
    if (wants) {
      wants = nullptr;
      continue;
    }
    if (w.size() > 5 && w.substr(w.size() - 5) == ".toml") description = w;
    if (!w.empty() && w[0] == '-') {
      for (CLI::App* a = level; a && !wants; a = a->get_parent()) {
        const CLI::Option* o = a->get_option_no_throw(w);
        if (o && o->get_type_size() != 0) wants = o;
        if (o) break;
      }
      continue;
    }
    CLI::App* next = nullptr;
    for (auto* sc : level->get_subcommands([](CLI::App*) { return true; }))
      if (sc->get_name() == w || (sc->get_name().rfind(w, 0) == 0 && !next)) next = sc;
    if (next) {
      level = next;
      positionals = 0;
    } else {
      ++positionals;
    }
  }
  // what a value is: its type name, or how a positional's name ends ("FILE",
  // "[OLD] FILE")
  auto kind_of = [](const CLI::Option* o) {
    std::string name = o->get_name();
    for (const std::string known : {kClass, kPath, kNode, kFile, kDir})
      if (o->get_type_name() == known ||
          (name.size() >= known.size() && name.substr(name.size() - known.size()) == known))
        return known;
    return std::string();
  };
  auto values = [&](const std::string& type) {
    std::vector<std::string> out;
    if (type == kFile) return std::vector<std::string>{"@file"};
    if (type == kDir) return std::vector<std::string>{"@dir"};
    if (type == kClass || type == kPath) {
      int rc = 0;
      Globals quiet = g;
      quiet.json_out = true;
      std::streambuf* keep = std::cout.rdbuf(nullptr);
      auto d = request(quiet, type == kClass ? "class.list" : "path.list", json::object(), &rc);
      std::cout.rdbuf(keep);
      if (d)
        for (auto& x : *d) out.push_back(x.value("name", ""));
    } else if (type == kNode && !description.empty()) {
      for (const auto& n : dp::load_cluster_file(description).nodes) out.push_back(n.name);
    }
    return out;
  };
  std::vector<std::string> cands;
  if (wants) {
    cands = values(kind_of(wants));
  } else if (cur.empty() || cur[0] != '-') {
    for (auto* sc : level->get_subcommands([](CLI::App*) { return true; }))
      if (!sc->get_group().empty()) cands.push_back(sc->get_name());
    // the next positional of a leaf command
    size_t i = 0;
    for (const CLI::Option* o :
         level->get_options([](const CLI::Option* o) { return o->get_positional(); }))
      if (i++ == positionals) {
        auto v = values(kind_of(o));
        cands.insert(cands.end(), v.begin(), v.end());
      }
  }
  if (!wants && (cur.empty() || cur[0] == '-'))
    for (CLI::App* a = level; a; a = a->get_parent())
      for (const CLI::Option* o : a->get_options())
        for (const auto& n : o->get_lnames()) cands.push_back("--" + n);
  std::vector<std::string> said;
  for (const auto& c : cands) {
    if (c.empty() || std::find(said.begin(), said.end(), c) != said.end()) continue;
    said.push_back(c);
    if (c[0] == '@' || c.rfind(cur, 0) == 0) std::cout << c << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpctl - operate dualpathd (dualpath " + std::string(dp::kVersion) + ")"};
  app.name("dpctl");  // not the path it was run by
  app.require_subcommand(1);
  app.fallthrough();  // -j, -p and -s anywhere on the line, as ip(8) and bpftool take them
  Globals g;
  if (const char* s = std::getenv("DPCTL_SOCKET")) g.socket = s;
  app.add_flag("-j,--json", g.json_out, "JSON output, errors included");
  app.add_flag("-p,--pretty", g.pretty, "indented JSON (implies -j)");
  app.add_option("-s,--socket", g.socket, "dualpathd control socket (env DPCTL_SOCKET)")
      ->capture_default_str()
      ->type_name(kFile);
  app.set_version_flag("--version", std::string(dp::kVersion));
  Action action;
  for (auto add : kObjects) add(app, g, action);

  if (argc > 1 && std::string(argv[1]) == "__complete")
    return complete(app, g, std::vector<std::string>(argv + 2, argv + argc));
  std::vector<std::string> args(argv + 1, argv + argc);
  if (std::string err = expand_commands(app, args); !err.empty()) {
    bool json_mode = std::any_of(args.begin(), args.end(), [](const std::string& a) {
      return a == "-j" || a == "--json" || a == "-p" || a == "--pretty";
    });
    if (json_mode)
      std::cout << json{{"error", err}}.dump() << "\n";
    else
      std::cerr << "dpctl: " << err << "\n";
    return kExitUsage;
  }
  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes them reversed
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    bool json_mode = false;
    for (int i = 1; i < argc; ++i)
      json_mode |= std::string(argv[i]) == "-j" || std::string(argv[i]) == "--json" ||
                   std::string(argv[i]) == "-p" || std::string(argv[i]) == "--pretty";
    if (json_mode) {
      std::cout << json{{"error", e.what()}}.dump() << "\n";
      return 2;
    }
    app.exit(e);
    return kExitUsage;  // as dpctl(8) says (CLI11's own codes vary)
  }
  if (g.pretty) g.json_out = true;
  return action ? action() : 2;
}

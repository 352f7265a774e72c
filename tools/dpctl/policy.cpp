// SPDX-License-Identifier: Apache-2.0
// dpctl policy check | show | diff | apply | rollback | reload | render
//
// Policies are meant to live in git. `apply FILE` checks FILE, shows what it
// changes against the running policy, installs it over the daemon's policy
// file (the running text kept beside it as FILE.prev) and reloads; a policy
// the daemon refuses is taken back off the disk, so nothing changes.
// `rollback` applies FILE.prev the same way.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "dpctl.h"
#include "dualpath/core/cluster.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/policy_diff.h"
#include "dualpath/kernel/procfs.h"

namespace dpctl {

namespace {

std::optional<std::string> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A temporary file beside `path`, synced, renamed over it: readers see the
// old file or the new one, never half of one. The mode of the file replaced
// is kept (0644 for a new one).
dp::Result<void> write_atomic(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmp.data());
  if (fd < 0) return DP_SYS_ERROR(errno, "cannot create a file beside {}", path);
  struct stat st {};
  mode_t mode = ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644;
  bool ok = ::fchmod(fd, mode) == 0;
  for (size_t off = 0; ok && off < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    ok = n > 0;
    off += ok ? static_cast<size_t>(n) : 0;
  }
  ok = ok && ::fsync(fd) == 0;
  int err = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    err = ok ? errno : err;
    ::unlink(tmp.c_str());
    return DP_SYS_ERROR(err, "cannot write {}", path);
  }
  return {};
}

// Puts `before` back at `path`: its old bytes, or no file when it had none.
void restore(const std::string& path, const std::optional<std::string>& before) {
  if (before)
    (void)write_atomic(path, *before);
  else
    ::unlink(path.c_str());
}

int print_errors(const Globals& g, const std::string& file,
                 const std::vector<dp::Diagnostic>& errors) {
  if (g.json_out) {
    json errs = json::array();
    for (auto& e : errors)
      errs.push_back(
          {{"file", e.file}, {"line", e.line}, {"column", e.column}, {"message", e.message}});
    // "error" as every -j error has it (dpctl(8)); "errors" has each one
    std::string first = errors.empty() ? "invalid" : errors.front().str();
    if (errors.size() > 1) first += fmt::format(" (and {} more)", errors.size() - 1);
    print_json(g, {{"valid", false}, {"file", file}, {"error", first}, {"errors", errs}});
  } else {
    for (auto& e : errors) std::cerr << e.str() << "\n";
    std::cerr << file << ": " << errors.size() << " error" << (errors.size() == 1 ? "" : "s")
              << "\n";
  }
  return 1;
}
int print_errors(const Globals& g, const std::string& file, const dp::PolicyLoad& load) {
  return print_errors(g, file, load.errors);
}

// The bytes of FILE, or of standard input for "-".
std::optional<std::string> read_input(const std::string& file) {
  if (file != "-") return read_bytes(file);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}
std::string input_name(const std::string& file) { return file == "-" ? "<stdin>" : file; }

// A cluster description given where a policy is expected: the policy it
// renders for `node` (the running daemon's), named "CLUSTER[NODE]".
struct NodePolicy {
  std::string label, text;
};
std::optional<NodePolicy> render_for(const Globals& g, const std::string& bytes,
                                     const std::string& file, const std::string& node, int* rc) {
  auto r = dp::render_cluster(bytes, file, node);
  if (!r.ok()) {
    *rc = print_errors(g, file, r.errors);
    return std::nullopt;
  }
  return NodePolicy{fmt::format("{}[{}]", file, node), r.nodes.front().text};
}

// A change's line is in the new file, or in the old one for a removal.
const std::string& file_of(const dp::PolicyChange& c, const std::string& old_file,
                           const std::string& new_file) {
  return c.kind == dp::PolicyChange::Kind::Removed ? old_file : new_file;
}

json changes_json(const std::vector<dp::PolicyChange>& changes, const std::string& old_file,
                  const std::string& new_file) {
  json out = json::array();
  for (auto& c : changes)
    out.push_back({{"kind", dp::to_string(c.kind)},
                   {"where", c.where},
                   {"before", c.before ? json(*c.before) : json(nullptr)},
                   {"after", c.after ? json(*c.after) : json(nullptr)},
                   {"file", file_of(c, old_file, new_file)},
                   {"line", c.line}});
  return out;
}

void print_changes(const std::vector<dp::PolicyChange>& changes, const std::string& old_file,
                   const std::string& new_file) {
  for (auto& c : changes)
    std::cout << "  " << c.str() << "   (" << file_of(c, old_file, new_file) << ":" << c.line
              << ")\n";
}

struct Running {
  std::string file, hash, node, text;
  json disk_hash;
};

std::optional<Running> running(const Globals& g, int* rc) {
  auto d = request(g, "policy.show", json::object(), rc);
  if (!d) return std::nullopt;
  if (!d->contains("text")) {
    *rc = fail(g, "this dualpathd does not report its policy's text (upgrade it)");
    return std::nullopt;
  }
  return Running{(*d)["file"], (*d)["hash"], (*d)["node"], (*d)["text"], (*d)["disk_hash"]};
}

// Checks `bytes`, shows what changes, installs them over the running policy's
// file (its text kept as FILE.prev) and reloads; puts both files back as
// they were if the daemon refuses.
int install(const Globals& g, const std::string& bytes, const std::string& label,
            const char* verb) {
  auto load = dp::parse_policy(bytes, label);
  if (!load.ok()) return print_errors(g, label, load);
  int rc = 0;
  auto run = running(g, &rc);
  if (!run) return rc;
  if (load.policy->node != run->node)
    return fail(g, fmt::format("{} is a policy for node \"{}\"; this daemon runs node \"{}\"",
                               label, load.policy->node, run->node));
  std::error_code ec;
  if (std::filesystem::is_symlink(run->file, ec))
    return fail(g, fmt::format("{} is a symbolic link to {}: apply would replace the link. Update "
                               "what it points to (git pull, say) and run dpctl policy reload",
                               run->file, std::filesystem::read_symlink(run->file, ec).string()));
  auto changes = dp::diff_policies(run->text, run->file, bytes, label);
  if (!changes) return fail(g, changes.error().what());
  const std::string prev = run->file + ".prev";
  if (changes->empty() && load.policy->hash == run->hash) {
    if (g.json_out)
      print_json(g, {{"applied", false}, {"hash", run->hash}, {"changes", json::array()}});
    else
      std::cout << label << " is the running policy (hash " << run->hash << "): nothing to do\n";
    return 0;
  }
  if (!g.json_out) {
    std::cout << verb << " " << label << " (hash " << load.policy->hash << ") over " << run->file
              << " (running, hash " << run->hash << "):\n";
    if (changes->empty()) std::cout << "  no change but in comments and layout\n";
    print_changes(*changes, "running", label);
  }
  auto old_file = read_bytes(run->file), old_prev = read_bytes(prev);
  if (auto w = write_atomic(prev, run->text); !w) return fail(g, w.error().what());
  if (auto w = write_atomic(run->file, bytes); !w) {
    restore(prev, old_prev);
    return fail(g, w.error().what());
  }
  auto r = dp::call(g.socket, json{{"cmd", "policy.reload"}, {"args", json::object()}});
  std::string why = !r                         ? r.error().what()
                    : !(*r).value("ok", false) ? (*r)["error"].value("message", "refused")
                                               : "";
  if (!why.empty()) {
    restore(run->file, old_file);
    restore(prev, old_prev);
    return fail(g, fmt::format("{} refused by dualpathd: {}; {} and {} are as they were", label,
                               why, run->file, prev));
  }
  std::string now = (*r)["data"].value("hash", "");
  if (g.json_out) {
    print_json(g, {{"applied", true},
                   {"file", run->file},
                   {"from", run->hash},
                   {"to", now},
                   {"previous", prev},
                   {"changes", changes_json(*changes, "running", label)}});
  } else {
    std::cout << "applied: policy " << run->hash << " -> " << now << "; the previous one is in "
              << prev << " (dpctl policy rollback)\n";
  }
  return 0;
}

// Every node's policy of a cluster description, checked.
int check_cluster(const Globals& g, const std::string& bytes, const std::string& file) {
  auto r = dp::render_cluster(bytes, file);
  if (!r.ok()) return print_errors(g, file, r.errors);
  if (g.json_out) {
    json nodes = json::array();
    for (auto& n : r.nodes)
      nodes.push_back(
          {{"name", n.name}, {"group", n.group}, {"hash", n.hash}, {"group_hash", n.group_hash}});
    print_json(g, {{"valid", true},
                   {"file", file},
                   {"cluster", r.cluster},
                   {"hash", r.hash},
                   {"groups", r.groups},
                   {"nodes", nodes}});
  } else {
    std::cout << file << ": valid cluster description (cluster " << r.cluster << ", "
              << r.nodes.size() << " node" << (r.nodes.size() == 1 ? "" : "s") << " in "
              << r.groups.size() << " group" << (r.groups.size() == 1 ? "" : "s") << ", hash "
              << r.hash << ")\n";
  }
  return 0;
}

int cmd_policy_check(const Globals& g, const std::string& file) {
  // "-": the policy on standard input (errors name it <stdin>)
  auto bytes = read_input(file);
  if (!bytes) return fail(g, fmt::format("cannot read {}: {}", file, std::strerror(errno)));
  if (dp::is_cluster_description(*bytes)) return check_cluster(g, *bytes, input_name(file));
  auto load = dp::parse_policy(*bytes, input_name(file));
  if (!load.ok()) return print_errors(g, file, load);
  const auto& p = *load.policy;
  // warnings about this host (exit 0): class ports a source port can draw
  auto warnings = dp::ephemeral_port_warnings(p, dp::read_ephemeral_ports());
  if (g.json_out) {
    print_json(g, {{"valid", true},
                   {"file", p.file},
                   {"node", p.node},
                   {"hash", p.hash},
                   {"paths", p.paths.size()},
                   {"classes", p.classes.size()},
                   {"warnings", warnings}});
  } else {
    for (auto& w : warnings) std::cerr << w << "\n";
    std::cout << p.file << ": valid (node " << p.node << ", " << p.paths.size() << " paths, "
              << p.classes.size() << " classes, hash " << p.hash << ")\n";
  }
  return 0;
}

int cmd_policy_reload(const Globals& g) {
  int rc;
  auto d = request(g, "policy.reload", json::object(), &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  std::cout << "policy reloaded (hash " << str((*d)["hash"]) << ")\n";
  return 0;
}

int cmd_policy_show(const Globals& g) {
  int rc = 0;
  auto d = request(g, "policy.show", json::object(), &rc);
  if (!d) return rc;
  if (g.json_out) return print_json(g, *d), 0;
  std::cout << "# running: " << str((*d)["file"]) << " (node " << str((*d)["node"]) << ", hash "
            << str((*d)["hash"]) << ")\n";
  const json& disk = (*d)["disk_hash"];
  if (disk.is_null())
    std::cout << "# on disk: the file cannot be read\n";
  else if (disk != (*d)["hash"])
    std::cout << "# on disk: hash " << str(disk)
              << ", not the running policy (dpctl policy diff FILE shows how it differs)\n";
  std::cout << str((*d)["text"]);
  return 0;
}

// Two cluster descriptions: which nodes their renderings add, remove and
// change, and each node's changes (lines in the node's rendered policy,
// NODE.toml, as --all writes it).
int diff_clusters(const Globals& g, const std::string& old_bytes, const std::string& old_file,
                  const std::string& new_bytes, const std::string& new_file) {
  auto a = dp::render_cluster(old_bytes, old_file), b = dp::render_cluster(new_bytes, new_file);
  for (auto* r : {&a, &b})
    if (!r->ok()) return print_errors(g, r->file, r->errors), 2;
  std::map<std::string, const dp::RenderedNode*> before;
  for (auto& n : a.nodes) before[n.name] = &n;
  json nodes = json::array();
  std::ostringstream text;
  size_t changed = 0;
  auto node_json = [](const std::string& name, const char* kind, const json& changes) {
    return json{{"node", name}, {"kind", kind}, {"changes", changes}};
  };
  for (auto& n : b.nodes) {
    auto it = before.find(n.name);
    std::string file = n.name + ".toml";
    if (it == before.end()) {
      ++changed;
      nodes.push_back(node_json(n.name, "added", json::array()));
      text << "+ node " << n.name << (n.group.empty() ? "" : " (group " + n.group + ")")
           << ": added\n";
      continue;
    }
    auto changes = dp::diff_policies(it->second->text, file, n.text, file);
    before.erase(it);
    if (!changes) return fail(g, changes.error().what()), 2;
    if (changes->empty()) continue;
    ++changed;
    nodes.push_back(node_json(n.name, "changed", changes_json(*changes, file, file)));
    text << "~ node " << n.name << (n.group.empty() ? "" : " (group " + n.group + ")") << ":\n";
    for (auto& c : *changes) text << "    " << c.str() << "   (" << file << ":" << c.line << ")\n";
  }
  for (auto& [name, n] : before) {
    ++changed;
    nodes.push_back(node_json(name, "removed", json::array()));
    text << "- node " << name << ": removed\n";
  }
  if (g.json_out) {
    print_json(g, {{"cluster", b.cluster},
                   {"old", {{"file", old_file}, {"hash", a.hash}, {"nodes", a.nodes.size()}}},
                   {"new", {{"file", new_file}, {"hash", b.hash}, {"nodes", b.nodes.size()}}},
                   {"nodes", nodes}});
  } else if (!changed) {
    std::cout << new_file << " (hash " << b.hash << ") changes no node's policy against "
              << old_file << " (hash " << a.hash << ")\n";
  } else {
    std::cout << "cluster " << b.cluster << ": " << old_file << " (hash " << a.hash << ") -> "
              << new_file << " (hash " << b.hash << "): " << changed << " of "
              << std::max(a.nodes.size(), b.nodes.size()) << " nodes change\n"
              << text.str();
  }
  return changed ? 1 : 0;
}

// Exit status as diff(1): 0 no change, 1 changes, 2 trouble. One file: the
// running policy against it. Two: OLD against NEW, offline (a review of a
// policy change in git needs no daemon). A cluster description stands for
// the policy it renders for the node on the other side (the running
// daemon's, or the other file's); two of them compare every node.
int cmd_policy_diff(const Globals& g, const std::vector<std::string>& files) {
  struct Side {
    std::string file, hash, text;
    bool cluster = false;
  };
  auto read_side = [&](const std::string& file) -> std::optional<Side> {
    auto bytes = read_bytes(file);
    if (!bytes) {
      fail(g, fmt::format("cannot read {}: {}", file, std::strerror(errno)));
      return std::nullopt;
    }
    return Side{file, "", *bytes, dp::is_cluster_description(*bytes)};
  };
  // A policy side is checked; a cluster side is rendered for `node`.
  auto resolve = [&](Side& s, const std::string& node) -> bool {
    if (s.cluster) {
      int rc = 0;
      auto r = render_for(g, s.text, s.file, node, &rc);
      if (!r) return false;
      s.file = r->label;
      s.text = r->text;
    }
    auto load = dp::parse_policy(s.text, s.file);
    if (!load.ok()) return print_errors(g, s.file, load), false;
    s.hash = load.policy->hash;
    return true;
  };
  auto node_of = [](const Side& s) {
    auto load = dp::parse_policy(s.text, s.file);
    return load.ok() ? load.policy->node : std::string();
  };
  std::optional<Side> from, to = read_side(files.back());
  if (!to) return 2;
  bool offline = files.size() == 2;
  if (offline) {
    from = read_side(files.front());
    if (!from) return 2;
    if (from->cluster && to->cluster)
      return diff_clusters(g, from->text, from->file, to->text, to->file);
    std::string node = from->cluster ? node_of(*to) : node_of(*from);
    if (!resolve(*from, node) || !resolve(*to, node)) return 2;
  } else {
    int rc = 0;
    auto run = running(g, &rc);
    if (!run) return 2;
    from = Side{run->file, run->hash, run->text, false};
    if (!resolve(*to, run->node)) return 2;
  }
  auto changes = dp::diff_policies(from->text, from->file, to->text, to->file);
  if (!changes) return fail(g, changes.error().what()), 2;
  const std::string old_label = offline ? from->file : "running";
  if (g.json_out) {
    print_json(g, {{offline ? "old" : "running", {{"file", from->file}, {"hash", from->hash}}},
                   {offline ? "new" : "candidate", {{"file", to->file}, {"hash", to->hash}}},
                   {"changes", changes_json(*changes, old_label, to->file)}});
  } else if (changes->empty()) {
    std::cout << to->file << " (hash " << to->hash << ") changes nothing against "
              << (offline ? from->file : "the running policy") << " (hash " << from->hash << ")\n";
  } else {
    std::cout << (offline ? "" : "running ") << from->file << " (hash " << from->hash << ") -> "
              << to->file << " (hash " << to->hash << "):\n";
    print_changes(*changes, old_label, to->file);
  }
  return changes->empty() ? 0 : 1;
}

// FILE as a policy, or a cluster description's policy for the running node.
int cmd_policy_apply(const Globals& g, const std::string& file) {
  auto bytes = read_bytes(file);
  if (!bytes) return fail(g, fmt::format("cannot read {}: {}", file, std::strerror(errno)));
  if (!dp::is_cluster_description(*bytes)) return install(g, *bytes, file, "applying");
  int rc = 0;
  auto run = running(g, &rc);
  if (!run) return rc;
  auto r = render_for(g, *bytes, file, run->node, &rc);
  if (!r) return rc;
  return install(g, r->text, r->label, "applying");
}

// Files written as write_atomic writes one, synced together rather than
// one by one (a fleet's thousands of policies: an fsync each costs a
// device cache flush each): every file to a temporary beside it, then one
// sync of the filesystem that holds them, then each renamed over its path,
// and the directory synced. No file is ever half written; a failure before
// the renames changes none.
dp::Result<void> write_all_atomic(const std::string& dir,
                                  const std::vector<std::pair<std::string, std::string>>& files) {
  std::vector<std::string> tmps;
  auto fail_all = [&](int err, const std::string& path) {
    for (auto& t : tmps) ::unlink(t.c_str());
    return DP_SYS_ERROR(err, "cannot write {}", path);
  };
  for (auto& [path, bytes] : files) {
    std::string tmp = path + ".tmp.XXXXXX";
    int fd = ::mkstemp(tmp.data());
    if (fd < 0) return fail_all(errno, path);
    tmps.push_back(tmp);
    struct stat st {};
    bool ok = ::fchmod(fd, ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0644) == 0;
    for (size_t off = 0; ok && off < bytes.size();) {
      ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
      ok = n > 0;
      off += ok ? static_cast<size_t>(n) : 0;
    }
    int err = errno;
    ::close(fd);
    if (!ok) return fail_all(err, path);
  }
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0 || ::syncfs(dfd) != 0) {
    int err = errno;
    if (dfd >= 0) ::close(dfd);
    return fail_all(err, dir);
  }
  for (size_t i = 0; i < files.size(); ++i)
    if (::rename(tmps[i].c_str(), files[i].first.c_str()) != 0) {
      int err = errno;
      ::close(dfd);
      tmps.erase(tmps.begin(), tmps.begin() + static_cast<long>(i));
      return fail_all(err, files[i].first);
    }
  (void)::fsync(dfd);
  ::close(dfd);
  return {};
}

// One node's policy on standard output, or every node's as DIR/NODE.toml.
// A file whose bytes would not change is not rewritten (its time stays,
// and a second run reports nothing written).
int cmd_policy_render(const Globals& g, const std::string& file, const std::string& node,
                      const std::string& dir) {
  auto bytes = read_input(file);
  if (!bytes) return fail(g, fmt::format("cannot read {}: {}", file, std::strerror(errno)));
  if (!dp::is_cluster_description(*bytes))
    return fail(g, fmt::format("{} is not a cluster description (it has no [cluster] section; "
                               "dualpath-cluster(5)). A node's policy needs no rendering: dpctl "
                               "policy check it",
                               input_name(file)));
  std::optional<std::string> only;
  if (!node.empty()) only = node;
  auto r = dp::render_cluster(*bytes, input_name(file), only);
  if (!r.ok()) return print_errors(g, input_name(file), r.errors);
  if (!node.empty()) {
    auto& n = r.nodes.front();
    if (g.json_out)
      print_json(g, {{"node", n.name},
                     {"hostname", n.hostname},
                     {"group", n.group},
                     {"hash", n.hash},
                     {"group_hash", n.group_hash},
                     {"text", n.text}});
    else
      std::cout << n.text;
    return 0;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fail(g, fmt::format("cannot make {}: {}", dir, ec.message()));
  json written = json::array(), same = json::array();
  std::vector<std::pair<std::string, std::string>> files;
  std::set<std::string> names;
  for (auto& n : r.nodes) {
    names.insert(n.name);
    std::string path = (std::filesystem::path(dir) / (n.name + ".toml")).string();
    if (read_bytes(path) == n.text) {
      same.push_back(n.name);
      continue;
    }
    files.push_back({path, std::move(n.text)});
    written.push_back(n.name);
  }
  if (auto w = write_all_atomic(dir, files); !w) return fail(g, w.error().what());
  // files of nodes the description no longer holds are left for the operator
  json stray = json::array();
  for (auto& e : std::filesystem::directory_iterator(dir, ec)) {
    auto name = e.path().filename().string();
    if (e.path().extension() != ".toml") continue;
    if (!names.contains(e.path().stem().string())) stray.push_back(name);
  }
  if (g.json_out) {
    print_json(g, {{"cluster", r.cluster},
                   {"dir", dir},
                   {"written", written},
                   {"unchanged", same},
                   {"not_in_description", stray}});
  } else {
    std::cout << dir << ": " << written.size() << " node polic"
              << (written.size() == 1 ? "y" : "ies") << " written, " << same.size()
              << " unchanged (cluster " << r.cluster << ", " << r.nodes.size() << " nodes)\n";
    for (auto& s : stray)
      std::cerr << "note: " << dir << "/" << s.get<std::string>()
                << " is not a node of the description; left as it is\n";
  }
  return 0;
}

int cmd_policy_rollback(const Globals& g) {
  int rc = 0;
  auto run = running(g, &rc);
  if (!run) return rc;
  std::string prev = run->file + ".prev";
  auto bytes = read_bytes(prev);
  if (!bytes)
    return fail(g, fmt::format("no previous policy: {} cannot be read ({}); rollback undoes a "
                               "dpctl policy apply",
                               prev, std::strerror(errno)));
  return install(g, *bytes, prev, "rolling back to");
}

}  // namespace

void add_policy(CLI::App& app, const Globals& g, Action& action) {
  struct Opts {
    std::string file, node, dir;
    std::vector<std::string> diff_files;
  };
  auto o = std::make_shared<Opts>();
  auto* pol = app.add_subcommand("policy", "policy files")->require_subcommand(1);
  auto* check = pol->add_subcommand(
      "check", "validate a policy file, or every node of a cluster description, offline");
  check->add_option("FILE", o->file, "policy or cluster file, or - for standard input")->required();
  check->callback([&g, &action, o] { action = [&g, o] { return cmd_policy_check(g, o->file); }; });
  pol->add_subcommand("reload", "make the daemon re-read its policy file (like SIGHUP)")
      ->callback([&g, &action] { action = [&g] { return cmd_policy_reload(g); }; });
  pol->add_subcommand("show", "the running policy's text, and whether the file on disk differs")
      ->callback([&g, &action] { action = [&g] { return cmd_policy_show(g); }; });
  auto* diff = pol->add_subcommand(
      "diff",
      "what FILE changes against the running policy, or NEW against OLD offline "
      "(exit 0 none, 1 some, 2 trouble)");
  diff->add_option("[OLD] FILE", o->diff_files, "policy file(s)")->required()->expected(1, 2);
  diff->callback(
      [&g, &action, o] { action = [&g, o] { return cmd_policy_diff(g, o->diff_files); }; });
  auto* apply = pol->add_subcommand(
      "apply", "check FILE, show its changes, install it as the daemon's policy and reload");
  apply->add_option("FILE", o->file, "policy file")->required();
  apply->callback([&g, &action, o] { action = [&g, o] { return cmd_policy_apply(g, o->file); }; });
  pol->add_subcommand("rollback", "apply the policy the last apply replaced (POLICY.prev)")
      ->callback([&g, &action] { action = [&g] { return cmd_policy_rollback(g); }; });
  auto* render = pol->add_subcommand(
      "render",
      "a node's policy from a cluster description (dualpath-cluster(5)), or every node's");
  render->add_option("CLUSTER", o->file, "cluster description, or - for standard input")
      ->required()
      ->type_name(kFile);
  auto* rn =
      render->add_option("--node", o->node, "print this node's policy (its name or hostname)")
          ->type_name(kNode);
  auto* ra = render->add_option("--all", o->dir, "write every node's policy as DIR/NODE.toml")
                 ->type_name(kDir);
  rn->excludes(ra);
  render->callback([&g, &action, o] {
    if (o->node.empty() && o->dir.empty())
      throw CLI::ValidationError("render", "give --node NAME or --all DIR");
    action = [&g, o] { return cmd_policy_render(g, o->file, o->node, o->dir); };
  });
}

}  // namespace dpctl

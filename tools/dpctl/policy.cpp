// SPDX-License-Identifier: Apache-2.0
// dpctl policy check | show | diff | apply | rollback | reload
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
#include <sstream>
#include <vector>

#include "dpctl.h"
#include "dualpath/core/policy.h"
#include "dualpath/core/policy_diff.h"

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

int print_errors(const Globals& g, const std::string& file, const dp::PolicyLoad& load) {
  if (g.json_out) {
    json errs = json::array();
    for (auto& e : load.errors)
      errs.push_back(
          {{"file", e.file}, {"line", e.line}, {"column", e.column}, {"message", e.message}});
    // "error" as every -j error has it (dpctl(8)); "errors" has each one
    std::string first = load.errors.empty() ? "invalid" : load.errors.front().str();
    if (load.errors.size() > 1) first += fmt::format(" (and {} more)", load.errors.size() - 1);
    print_json(g, {{"valid", false}, {"file", file}, {"error", first}, {"errors", errs}});
  } else {
    for (auto& e : load.errors) std::cerr << e.str() << "\n";
    std::cerr << file << ": " << load.errors.size() << " error"
              << (load.errors.size() == 1 ? "" : "s") << "\n";
  }
  return 1;
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

}  // namespace

int cmd_policy_check(const Globals& g, const std::string& file) {
  // "-": the policy on standard input (errors name it <stdin>)
  auto load = file == "-" ? dp::parse_policy(std::string(std::istreambuf_iterator<char>(std::cin),
                                                         std::istreambuf_iterator<char>()),
                                             "<stdin>")
                          : dp::load_policy_file(file);
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

// Exit status as diff(1): 0 no change, 1 changes, 2 trouble. One file: the
// running policy against it. Two: OLD against NEW, offline (a review of a
// policy change in git needs no daemon).
int cmd_policy_diff(const Globals& g, const std::vector<std::string>& files) {
  struct Side {
    std::string file, hash, text;
  };
  auto load_side = [&](const std::string& file) -> std::optional<Side> {
    auto bytes = read_bytes(file);
    if (!bytes) {
      fail(g, fmt::format("cannot read {}: {}", file, std::strerror(errno)));
      return std::nullopt;
    }
    auto load = dp::parse_policy(*bytes, file);
    if (!load.ok()) {
      print_errors(g, file, load);
      return std::nullopt;
    }
    return Side{file, load.policy->hash, *bytes};
  };
  std::optional<Side> from, to = load_side(files.back());
  if (!to) return 2;
  bool offline = files.size() == 2;
  if (offline) {
    from = load_side(files.front());
  } else {
    int rc = 0;
    if (auto run = running(g, &rc)) from = Side{run->file, run->hash, run->text};
  }
  if (!from) return 2;
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

int cmd_policy_apply(const Globals& g, const std::string& file) {
  auto bytes = read_bytes(file);
  if (!bytes) return fail(g, fmt::format("cannot read {}: {}", file, std::strerror(errno)));
  return install(g, *bytes, file, "applying");
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

}  // namespace dpctl

// SPDX-License-Identifier: Apache-2.0
#include "dualpath/kernel/cgroups.h"

#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <linux/magic.h>
#include <algorithm>
#include <deque>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

namespace dp {

namespace fs = std::filesystem;

Result<uint64_t> cgroup_id(const std::string& dir) {
  struct statfs sfs {};
  if (::statfs(dir.c_str(), &sfs) != 0)
    return DP_SYS_ERROR(errno, "cgroup {} is not accessible", dir);
  if (sfs.f_type != CGROUP2_SUPER_MAGIC)
    return DP_SYS_ERROR(EINVAL, "{} is not in a cgroup v2 filesystem", dir);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return DP_SYS_ERROR(errno, "cgroup {} is not accessible", dir);
  if (!S_ISDIR(st.st_mode)) return DP_SYS_ERROR(ENOTDIR, "cgroup {} is not a directory", dir);
  return static_cast<uint64_t>(st.st_ino);
}

Result<std::string> own_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return DP_SYS_ERROR(ENOENT, "this process is in no cgroup v2 (/proc/self/cgroup)");
}

std::optional<std::string> find_unit_cgroup(const std::string& root, const std::string& unit,
                                            int max_depth) {
  std::deque<std::pair<fs::path, int>> queue{{fs::path(root), 0}};  // breadth-first
  std::error_code ec;
  while (!queue.empty()) {
    auto [dir, depth] = queue.front();
    queue.pop_front();
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (!it->is_directory(ec) || it->is_symlink(ec)) continue;
      const fs::path& p = it->path();
      // (fmt, not "/" + string: GCC 12 at -O3 warns -Wrestrict on that, a false positive)
      if (p.filename() == unit) return fmt::format("/{}", fs::relative(p, root, ec).string());
      if (depth + 1 < max_depth) queue.push_back({p, depth + 1});
    }
    ec.clear();
  }
  return std::nullopt;
}

std::string systemd_escape(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == ':' || ch == '_' || ch == '.')
      out += static_cast<char>(ch);
    else
      out += fmt::format("\\x{:02x}", ch);
  }
  return out;
}

RunSlice run_slice(const std::string& node, const std::string& klass) {
  std::string n = systemd_escape(node), c = systemd_escape(klass);
  RunSlice r;
  r.unit = fmt::format("dualpath-{}-{}.slice", n, c);
  r.dir = fmt::format("/dualpath.slice/dualpath-{}.slice/{}", n, r.unit);
  return r;
}

std::vector<CgroupRule> resolve_cgroups(const Policy& p, const std::string& root,
                                        const std::vector<CgroupRule>& before) {
  std::vector<CgroupRule> out;
  for (size_t k = 0; k < p.classes.size(); ++k) {
    for (auto& g : p.classes[k].cgroups) {
      CgroupRule r{k, g.str(), "", 0};
      // a unit found before is looked for where it was first: the tree is
      // searched only when it is gone from there
      auto was = std::find_if(before.begin(), before.end(), [&](const CgroupRule& b) {
        return b.klass == k && b.rule == r.rule && !b.dir.empty();
      });
      if (g.kind == CgroupSpec::Kind::Path)
        r.dir = g.text;
      else if (was != before.end() && fs::is_directory(root + was->dir))
        r.dir = was->dir;
      else if (auto d = find_unit_cgroup(root, g.text))
        r.dir = *d;
      if (!r.dir.empty())
        if (auto id = cgroup_id(root + r.dir)) r.id = *id;
      out.push_back(std::move(r));
    }
    RunSlice s = run_slice(p.node, p.classes[k].name);
    if (auto id = cgroup_id(root + s.dir)) out.push_back({k, "dpctl run", s.dir, *id});
  }
  return out;
}

Result<std::string> make_run_slice(const std::string& root, const std::string& node,
                                   const std::string& klass) {
  std::string dir = root + run_slice(node, klass).dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return DP_SYS_ERROR(ec.value(), "creating cgroup {} failed", dir);
  DP_TRY(cgroup_id(dir));
  return dir;
}

void remove_run_slices(const std::string& root, const std::string& node,
                       const std::vector<std::string>& keep) {
  const std::string n = systemd_escape(node);
  const fs::path top = fs::path(root) / "dualpath.slice";
  const fs::path mine = top / fmt::format("dualpath-{}.slice", n);
  std::error_code ec;
  std::vector<std::string> kept;
  for (auto& k : keep) kept.push_back(run_slice(node, k).unit);
  std::vector<fs::path> gone;
  for (fs::directory_iterator it(mine, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename();
    if (!it->is_directory(ec) || name.rfind(fmt::format("dualpath-{}-", n), 0) != 0 ||
        name.size() < 6 || name.substr(name.size() - 6) != ".slice")
      continue;
    if (std::find(kept.begin(), kept.end(), name) == kept.end()) gone.push_back(it->path());
  }
  for (auto& d : gone) ::rmdir(d.c_str());  // EBUSY while a process or a child cgroup is in it
  ::rmdir(mine.c_str());
  ::rmdir(top.c_str());
}

}  // namespace dp

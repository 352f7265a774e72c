// SPDX-License-Identifier: Apache-2.0
// LayoutUpgrade (daemon/kernel/upgrade.cpp) on real maps: an "old" layout's
// maps, pinned in a private bpffs directory, are carried into maps of a
// "new" layout while a stand-in for the old programs keeps writing to them.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "dualpath/kernel/attach.h"
#include "dualpath/kernel/upgrade.h"

namespace {

using dp::Fd;

struct OldRow {  // the old value: 16 bytes
  uint64_t a, b;
};
struct NewRow {  // the new value: a field appended
  uint64_t a, b, c;
};

class Upgrade : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "skipped: BPF tests need root (CAP_BPF)";
    dir_ = "/sys/fs/bpf/dualpath-test-upgrade-" + std::to_string(::getpid());
    ASSERT_TRUE(dp::ensure_bpffs(dir_)) << dir_;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  int make(bpf_map_type t, uint32_t key, uint32_t value, uint32_t entries) {
    int fd = bpf_map_create(t, nullptr, key, value, entries, nullptr);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    fds_.emplace_back(fd);
    return fd;
  }
  std::string pin(int fd, const std::string& name) {
    std::string p = dir_ + "/" + name;
    EXPECT_EQ(bpf_obj_pin(fd, p.c_str()), 0) << p;
    return p;
  }
  static uint32_t max_entries_of(const std::string& path) {
    Fd fd(bpf_obj_get(path.c_str()));
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (!fd.valid() || bpf_obj_get_info_by_fd(fd.get(), &info, &len) != 0) return 0;
    return info.max_entries;
  }
  std::string dir_;
  std::vector<Fd> fds_;
};

TEST_F(Upgrade, CarriesArraysCountersAndHashesAndWhatCameAfterTheCopy) {
  const size_t cpus = static_cast<size_t>(libbpf_num_possible_cpus());
  // old layout: an array, per-CPU counters and an LRU hash of 16-byte values
  int arr_old = make(BPF_MAP_TYPE_ARRAY, 4, sizeof(OldRow), 8);
  int cnt_old = make(BPF_MAP_TYPE_PERCPU_ARRAY, 4, sizeof(OldRow), 4);
  int hash_old = make(BPF_MAP_TYPE_LRU_HASH, 8, sizeof(OldRow), 64);
  for (uint32_t k = 0; k < 8; ++k) {
    OldRow v{k, 100 + k};
    ASSERT_EQ(bpf_map_update_elem(arr_old, &k, &v, BPF_ANY), 0);
  }
  std::vector<OldRow> per(cpus);
  for (size_t c = 0; c < cpus; ++c) per[c] = {10 * (c + 1), 1};
  uint32_t two = 2;
  ASSERT_EQ(bpf_map_update_elem(cnt_old, &two, per.data(), BPF_ANY), 0);
  for (uint64_t k = 1; k <= 3; ++k) {
    OldRow v{k * 7, k * 9};
    ASSERT_EQ(bpf_map_update_elem(hash_old, &k, &v, BPF_ANY), 0);
  }
  std::string arr_pin = pin(arr_old, "dp_arr"), cnt_pin = pin(cnt_old, "dp_cnt");
  std::string hash_pin = pin(hash_old, "dp_hash");
  pin(make(BPF_MAP_TYPE_ARRAY, 4, 4, 1), "dp_gone");  // a map the new build does not have
  // new layout: values grow, the array shrinks
  int arr_new = make(BPF_MAP_TYPE_ARRAY, 4, sizeof(NewRow), 4);
  int cnt_new = make(BPF_MAP_TYPE_PERCPU_ARRAY, 4, sizeof(NewRow), 4);
  int hash_new = make(BPF_MAP_TYPE_LRU_HASH, 8, sizeof(NewRow), 128);

  std::vector<dp::StaleMap> stale;
  stale.push_back({"dp_arr", arr_pin, Fd(bpf_obj_get(arr_pin.c_str())), arr_new});
  stale.push_back({"dp_cnt", cnt_pin, Fd(bpf_obj_get(cnt_pin.c_str())), cnt_new});
  stale.push_back({"dp_hash", hash_pin, Fd(bpf_obj_get(hash_pin.c_str())), hash_new});
  auto u = dp::LayoutUpgrade::begin(std::move(stale));
  ASSERT_TRUE(u) << u.error().str();
  ASSERT_EQ(u->report().size(), 3u);
  EXPECT_NE(u->report()[0].find("4 entries carried over (value 16 -> 24 bytes, 8 -> 4"),
            std::string::npos)
      << u->report()[0];

  // the old programs go on until the swap: they count, make and end flows
  for (size_t c = 0; c < cpus; ++c) per[c].a += 5;
  ASSERT_EQ(bpf_map_update_elem(cnt_old, &two, per.data(), BPF_ANY), 0);
  uint64_t made = 4, ended = 1;
  OldRow v4{44, 45};
  ASSERT_EQ(bpf_map_update_elem(hash_old, &made, &v4, BPF_ANY), 0);
  ASSERT_EQ(bpf_map_delete_elem(hash_old, &ended), 0);
  // and the new programs have started counting too
  std::vector<NewRow> cur(cpus);
  ASSERT_EQ(bpf_map_lookup_elem(cnt_new, &two, cur.data()), 0);
  cur[0].a += 1000;
  ASSERT_EQ(bpf_map_update_elem(cnt_new, &two, cur.data(), BPF_ANY), 0);

  ASSERT_TRUE(u->finish(dir_, {"dp_arr", "dp_cnt", "dp_hash"}));

  for (uint32_t k = 0; k < 4; ++k) {
    NewRow n{};
    ASSERT_EQ(bpf_map_lookup_elem(arr_new, &k, &n), 0);
    EXPECT_EQ(n.a, k);
    EXPECT_EQ(n.b, 100 + k);
    EXPECT_EQ(n.c, 0u) << "a field the old layout did not have starts at zero";
  }
  ASSERT_EQ(bpf_map_lookup_elem(cnt_new, &two, cur.data()), 0);
  for (size_t c = 0; c < cpus; ++c) {
    EXPECT_EQ(cur[c].a, 10 * (c + 1) + 5 + (c == 0 ? 1000 : 0))
        << "cpu " << c << ": the copy, the old programs' increments since, the new ones'";
    EXPECT_EQ(cur[c].b, 1u);
  }
  NewRow h{};
  for (uint64_t k : {2, 3, 4}) {
    ASSERT_EQ(bpf_map_lookup_elem(hash_new, &k, &h), 0) << k;
    EXPECT_EQ(h.a, k == 4 ? 44 : k * 7);
  }
  EXPECT_NE(bpf_map_lookup_elem(hash_new, &ended, &h), 0) << "a flow ended before the swap";

  // the new maps are at the old pins; the map this build lacks is unpinned
  EXPECT_EQ(max_entries_of(arr_pin), 4u);
  EXPECT_EQ(max_entries_of(hash_pin), 128u);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/dp_gone"));
}

TEST_F(Upgrade, AMapWhoseKeyChangedStartsEmptyAndSaysSo) {
  int old_fd = make(BPF_MAP_TYPE_HASH, 8, 8, 16);
  uint64_t k = 1, v = 2;
  ASSERT_EQ(bpf_map_update_elem(old_fd, &k, &v, BPF_ANY), 0);
  std::string p = pin(old_fd, "dp_keyed");
  int fresh = make(BPF_MAP_TYPE_HASH, 16, 8, 16);
  std::vector<dp::StaleMap> stale;
  stale.push_back({"dp_keyed", p, Fd(bpf_obj_get(p.c_str())), fresh});
  auto u = dp::LayoutUpgrade::begin(std::move(stale));
  ASSERT_TRUE(u) << u.error().str();
  EXPECT_NE(u->report()[0].find("not carried over"), std::string::npos) << u->report()[0];
  ASSERT_TRUE(u->finish(dir_, {"dp_keyed"}));
  std::vector<uint8_t> key(16), next(16);
  EXPECT_NE(bpf_map_get_next_key(fresh, nullptr, next.data()), 0) << "empty";
  Fd pinned(bpf_obj_get(p.c_str()));
  bpf_map_info info{};
  uint32_t len = sizeof(info);
  ASSERT_EQ(bpf_obj_get_info_by_fd(pinned.get(), &info, &len), 0);
  EXPECT_EQ(info.key_size, 16u) << "the new map is pinned";
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// The running policy: its text and where it came from, and a reload of its
// file.
#include <filesystem>

#include "command.h"

namespace dp {

std::vector<Command> policy_commands(Node& n) {
  return {
      {"policy.show",
       false,
       "the running policy's text, and whether the file on disk differs",
       {},
       [&n](const json&) {
         const Policy& pol = n.policy();
         std::error_code ec;
         std::string file = std::filesystem::absolute(pol.file, ec).string();
         return reply_ok({{"file", ec ? pol.file : file},
                          {"hash", pol.hash},
                          {"node", pol.node},
                          {"text", pol.text},
                          {"disk_hash", policy_disk_hash(n)}});
       }},
      {"policy.reload",
       true,
       "re-read the policy file (as SIGHUP does)",
       {},
       [&n](const json&) {
         auto r = n.reload();
         if (!r) return reply_error(ErrorCode::Invalid, r.error().what());
         return reply_ok({{"hash", n.policy().hash}});
       }},
  };
}

}  // namespace dp

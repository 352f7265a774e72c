// SPDX-License-Identifier: Apache-2.0
// The scheduler's and path health's decisions, with their reasons.
#include "command.h"

namespace dp {

std::vector<Command> events_commands(Node& n) {
  return {
      {"events",
       false,
       "the scheduler's decisions, with their reasons",
       {{"since", ArgType::Unsigned, false, "only events after this number", "an event number"}},
       [&n](const json& args) {
         return reply_ok(n.events().render(n.policy(), args.value("since", uint64_t{0})));
       }},
  };
}

}  // namespace dp

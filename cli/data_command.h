// glmctl data ...: turn text and chat JSONL into training data and look at
// it (preprocess, pack, inspect).
#ifndef GLM_CLI_DATA_COMMAND_H_
#define GLM_CLI_DATA_COMMAND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "cli/command.h"
#include "data/sequence_packing.h"

namespace glm {

std::vector<Command> DataCommands();

// The packing report of `glmctl data pack`, in the terms of the SFT cards.
std::string PackingStatsText(const PackingStats& stats, int64_t seq_length,
                             int64_t pad_seq_to_mult);

}  // namespace glm

#endif  // GLM_CLI_DATA_COMMAND_H_

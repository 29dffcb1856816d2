// Supervised fine-tuning conversations: chat JSONL in, token ids with an
// assistant-only loss mask out.
//
// Input: one JSON object per line,
//   {"messages": [{"role": "system|user|assistant", "content": "..."}, ...]}
// Blank lines are skipped. Every conversation needs an assistant message.
//
// Template (GLM-like): each message is rendered as
//   <|role|> "\n" content <|end|>
// with the role markers and <|end|> single tokens of the tokenizer. The loss
// mask is 1 on the content tokens of assistant messages and on their <|end|>
// (so the model learns to stop), 0 everywhere else.
#ifndef GLM_DATA_CHAT_SFT_H_
#define GLM_DATA_CHAT_SFT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"

namespace glm {

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

struct Conversation {
  std::vector<ChatMessage> messages;
  int64_t line = 0;  // 1-based line in the source, for error messages
};

// `source` names the text in errors: "SOURCE:LINE: messages[1].role: ...".
absl::StatusOr<std::vector<Conversation>> ParseChatJsonl(
    const std::string& text, const std::string& source);
absl::StatusOr<std::vector<Conversation>> ReadChatJsonl(
    const std::string& path);

// One tokenized example: loss_mask[t] is 1 when tokens[t] is a supervised
// target (predicted from the positions before it).
struct SftSequence {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask;
};

// FailedPrecondition when the tokenizer lacks a chat marker.
absl::StatusOr<SftSequence> RenderConversation(const Conversation& conversation,
                                               const Tokenizer& tokenizer);

}  // namespace glm

#endif  // GLM_DATA_CHAT_SFT_H_

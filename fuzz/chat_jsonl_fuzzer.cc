// Chat JSONL for SFT (glmctl data pack): every line parses into a
// conversation or the text is refused, naming the line.
#include <cstdint>
#include <string>

#include "data/chat_sft.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)glm::ParseChatJsonl(text, "input.jsonl");
  return 0;
}

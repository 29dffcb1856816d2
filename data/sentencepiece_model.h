// A loaded SentencePiece model behind a header free of Abseil. Debian's
// sentencepiece_processor.h declares `absl::string_view` itself, which
// collides with Abseil's own class, so only sentencepiece_model.cc includes
// it, and that file includes nothing from Abseil. How the library is loaded
// (at run time, isolated from the system protobuf) is explained there.
#ifndef GLM_DATA_SENTENCEPIECE_MODEL_H_
#define GLM_DATA_SENTENCEPIECE_MODEL_H_

#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace glm {

class SentencePieceModel {
 public:
  // False in an AddressSanitizer build, which cannot load libsentencepiece
  // (see the .cc file); Load then fails saying so.
  static bool Loadable();

  SentencePieceModel();
  ~SentencePieceModel();
  SentencePieceModel(const SentencePieceModel&) = delete;
  SentencePieceModel& operator=(const SentencePieceModel&) = delete;

  // False with `error` set when the file is missing or not a model, or
  // libsentencepiece cannot be loaded. The other methods need a loaded model.
  bool Load(const std::string& path, std::string* error);

  int size() const;
  int eos_id() const;
  int pad_id() const;
  // Id of `piece`, or -1 when the model does not have it.
  int Find(const std::string& piece) const;
  bool IsControl(int id) const;
  const std::string& Piece(int id) const;

  std::vector<int> Encode(std::string_view text) const;
  std::string Decode(const std::vector<int>& ids) const;

 private:
  sentencepiece::SentencePieceProcessor* processor_ = nullptr;
};

}  // namespace glm

#endif  // GLM_DATA_SENTENCEPIECE_MODEL_H_

#include "data/sentencepiece_model.h"

#include <dlfcn.h>
#include <sentencepiece_processor.h>

#include <new>

// Debian's libsentencepiece embeds its own protobuf-lite 3.14 and exports
// those symbols under the same names as the system libprotobuf 3.21. In one
// process the two copies cannot both win the global symbol lookup: linked
// either way round, one of them ends up running against the other's
// internals and fails its version check or crashes. So the library is not
// linked here. It is opened with dlopen(RTLD_LOCAL | RTLD_DEEPBIND), which
// makes its own references bind to its own protobuf copy and keeps its
// symbols out of everyone else's lookup. The processor's methods are virtual,
// so calls go through its vtable into the library; the few non-virtual entry
// points used (constructor, Status destructor and ToString) are looked up
// by their mangled names.

// AddressSanitizer refuses dlopen with RTLD_DEEPBIND
// (https://github.com/google/sanitizers/issues/611), and without it the
// library's protobuf copy clashes with the system's as described above; so an
// ASan build (gcc defines __SANITIZE_ADDRESS__, clang has the feature) does
// not try.
#if defined(__SANITIZE_ADDRESS__)
#define GLM_ADDRESS_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GLM_ADDRESS_SANITIZER 1
#endif
#endif

namespace glm {
namespace {

#ifdef GLM_ADDRESS_SANITIZER
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif

using sentencepiece::SentencePieceProcessor;
using sentencepiece::util::Status;

struct Library {
  void (*construct_processor)(void* memory) = nullptr;
  void (*destroy_status)(Status* status) = nullptr;
  std::string (*status_to_string)(const Status* status) = nullptr;
  std::string error;  // why the library could not be used, if it cannot
};

const Library& OpenLibrary() {
  static const Library* library = [] {
    auto* opened = new Library();
    if (kAddressSanitizer) {
      opened->error =
          "libsentencepiece.so.0 cannot be loaded in an AddressSanitizer "
          "build (ASan refuses the RTLD_DEEPBIND that keeps its protobuf copy "
          "apart)";
      return opened;
    }
    void* handle =
        dlopen("libsentencepiece.so.0", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (handle == nullptr) {
      opened->error = dlerror();
      return opened;
    }
    opened->construct_processor = reinterpret_cast<void (*)(void*)>(
        dlsym(handle, "_ZN13sentencepiece22SentencePieceProcessorC1Ev"));
    opened->destroy_status = reinterpret_cast<void (*)(Status*)>(
        dlsym(handle, "_ZN13sentencepiece4util6StatusD1Ev"));
    opened->status_to_string = reinterpret_cast<std::string (*)(const Status*)>(
        dlsym(handle, "_ZNK13sentencepiece4util6Status8ToStringB5cxx11Ev"));
    if (!opened->construct_processor || !opened->destroy_status ||
        !opened->status_to_string) {
      opened->error = "libsentencepiece.so.0 lacks an expected symbol";
    }
    return opened;
  }();
  return *library;
}

// Holds a Status returned by the library and destroys it with the
// library's destructor.
class LibraryStatus {
 public:
  template <typename Call>
  explicit LibraryStatus(Call call) {
    new (&slot_.status) Status(call());  // guaranteed copy elision
  }
  ~LibraryStatus() { OpenLibrary().destroy_status(&slot_.status); }
  LibraryStatus(const LibraryStatus&) = delete;
  LibraryStatus& operator=(const LibraryStatus&) = delete;

  bool ok() const { return slot_.status.ok(); }
  std::string ToString() const {
    return OpenLibrary().status_to_string(&slot_.status);
  }

 private:
  union Slot {
    Slot() {}
    ~Slot() {}
    Status status;
  } slot_;
};

}  // namespace

bool SentencePieceModel::Loadable() { return !kAddressSanitizer; }

SentencePieceModel::SentencePieceModel() = default;

SentencePieceModel::~SentencePieceModel() {
  delete processor_;  // virtual destructor, in the library
}

bool SentencePieceModel::Load(const std::string& path, std::string* error) {
  const Library& library = OpenLibrary();
  if (!library.error.empty()) {
    *error = library.error;
    return false;
  }
  if (processor_ == nullptr) {
    void* memory = ::operator new(sizeof(SentencePieceProcessor));
    library.construct_processor(memory);
    processor_ = static_cast<SentencePieceProcessor*>(memory);
  }
  LibraryStatus status(
      [&] { return processor_->Load(std::string_view(path)); });
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

int SentencePieceModel::size() const { return processor_->GetPieceSize(); }
int SentencePieceModel::eos_id() const { return processor_->eos_id(); }
int SentencePieceModel::pad_id() const { return processor_->pad_id(); }

int SentencePieceModel::Find(const std::string& piece) const {
  const int id = processor_->PieceToId(piece);
  return processor_->IsUnknown(id) ? -1 : id;
}

bool SentencePieceModel::IsControl(int id) const {
  return processor_->IsControl(id);
}

const std::string& SentencePieceModel::Piece(int id) const {
  return processor_->IdToPiece(id);
}

std::vector<int> SentencePieceModel::Encode(std::string_view text) const {
  std::vector<int> ids;
  // Fails only when no model is loaded.
  LibraryStatus status([&] { return processor_->Encode(text, &ids); });
  return ids;
}

std::string SentencePieceModel::Decode(const std::vector<int>& ids) const {
  Status (SentencePieceProcessor::*decode)(const std::vector<int>&,
                                           std::string*) const =
      &SentencePieceProcessor::Decode;
  std::string text;
  LibraryStatus status([&] { return (processor_->*decode)(ids, &text); });
  return text;
}

}  // namespace glm

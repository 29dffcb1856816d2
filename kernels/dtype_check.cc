#include "kernels/dtype_check.h"

#include <cstdio>
#include <cstdlib>

namespace glm {
namespace {

[[noreturn]] void Refuse(const char* op, const char* operand, ElementType dtype,
                         const char* takes) {
  std::fprintf(stderr, "%s: operand %s is %s; the op takes %s there\n", op,
               operand, ElementTypeName(dtype), takes);
  std::abort();
}

}  // namespace

void CheckF32(const char* op, std::initializer_list<ConstMatrixView> views) {
  int position = 0;
  for (const ConstMatrixView& view : views) {
    ++position;
    if (!view.empty() && view.dtype != ElementType::kF32) {
      char operand[24];
      std::snprintf(operand, sizeof(operand), "#%d", position);
      Refuse(op, operand, view.dtype, "f32 only");
    }
  }
}

void CheckActivation(const char* op, const char* operand, ConstMatrixView view,
                     ElementType activation) {
  if (view.empty() || view.dtype == ElementType::kF32 ||
      view.dtype == activation) {
    return;
  }
  Refuse(op, operand, view.dtype,
         activation == ElementType::kF32 ? "f32 only"
                                         : "f32 or the activation type");
}

}  // namespace glm

#include "model/dense_mlp.h"

namespace glm {

void MlpForward(Backend& backend, const MlpParameters& p, ConstMatrixView x,
                ConstMatrixView residual, MatrixView out,
                MlpActivations* acts) {
  const int64_t inter = p.gate_proj.value.dim(0);
  // gate_up is read only by SwiGLU (both directions), hidden only by the down
  // projection's products: the activation type.
  acts->gate_up =
      Tensor::ForOutput({x.rows, 2 * inter}, backend.ActivationType());
  acts->hidden = Tensor::ForOutput({x.rows, inter}, backend.ActivationType());
  MatrixView gate_up = acts->gate_up.Matrix();
  backend.Linear(x, p.gate_proj.value.Matrix(), gate_up.Columns(0, inter),
                 false);
  backend.Linear(x, p.up_proj.value.Matrix(), gate_up.Columns(inter, inter),
                 false);
  backend.SwiGluForward(gate_up.Columns(0, inter),
                        gate_up.Columns(inter, inter), acts->hidden.Matrix());
  if (residual.data != nullptr) {
    backend.LinearAdd(acts->hidden.Matrix(), p.down_proj.value.Matrix(),
                      residual, out);
  } else {
    backend.Linear(acts->hidden.Matrix(), p.down_proj.value.Matrix(), out,
                   /*accumulate=*/false);
  }
}

void MlpBackward(Backend& backend, MlpParameters& p, ConstMatrixView x,
                 const MlpActivations& acts, ConstMatrixView dout,
                 MatrixView dx) {
  const int64_t inter = p.gate_proj.value.dim(0);
  // Read only by SwiGLU's backward.
  Tensor dhidden = WrittenInputGradient(backend, {x.rows, inter});
  // Read only by the gate and up products' backward.
  Tensor dgate_up =
      Tensor::ForOutput({x.rows, 2 * inter}, backend.ActivationType());
  backend.LinearBackward(acts.hidden.Matrix(), p.down_proj.value.Matrix(), dout,
                         dhidden.Matrix(), p.down_proj.grad.Matrix());
  ConstMatrixView gate_up = acts.gate_up.Matrix();
  MatrixView dgu = dgate_up.Matrix();
  backend.SwiGluBackward(gate_up.Columns(0, inter),
                         gate_up.Columns(inter, inter), dhidden.Matrix(),
                         dgu.Columns(0, inter), dgu.Columns(inter, inter));
  backend.LinearBackward(x, p.gate_proj.value.Matrix(), dgu.Columns(0, inter),
                         dx, p.gate_proj.grad.Matrix());
  backend.LinearBackward(x, p.up_proj.value.Matrix(), dgu.Columns(inter, inter),
                         dx, p.up_proj.grad.Matrix());
}

}  // namespace glm

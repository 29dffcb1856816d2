// Checks the CUDA RMSNorm against a double-precision CPU reference on fresh
// random inputs and prints the NMSE of y, dx and dweight. Runs on a GPU
// machine; exits 1 when any NMSE exceeds the tolerance.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/rms_norm.cuh"

namespace {

constexpr double kTolerance = 1e-10;

double Nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return err / (norm > 0 ? norm : 1);
}

struct Reference {
  std::vector<double> y, dx, dweight;
};

Reference CpuReference(const std::vector<float>& x, const std::vector<float>& w,
                       const std::vector<float>& dy, int rows, int dim,
                       double eps) {
  Reference ref{std::vector<double>(x.size()), std::vector<double>(x.size()),
                std::vector<double>(dim, 0.0)};
  for (int r = 0; r < rows; ++r) {
    const float* row = &x[r * dim];
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += double(row[i]) * row[i];
    const double rstd = 1.0 / std::sqrt(ss / dim + eps);
    double dot = 0;
    for (int i = 0; i < dim; ++i)
      dot += double(w[i]) * dy[r * dim + i] * row[i];
    for (int i = 0; i < dim; ++i) {
      ref.y[r * dim + i] = w[i] * row[i] * rstd;
      ref.dx[r * dim + i] =
          rstd * (w[i] * dy[r * dim + i] - row[i] * rstd * rstd * dot / dim);
      ref.dweight[i] += dy[r * dim + i] * row[i] * rstd;
    }
  }
  return ref;
}

float* ToDevice(const std::vector<float>& host) {
  float* device = nullptr;
  GLM_CUDA_CHECK(cudaMalloc(&device, host.size() * sizeof(float)));
  GLM_CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(float),
                            cudaMemcpyHostToDevice));
  return device;
}

std::vector<float> ToHost(const float* device, size_t n) {
  std::vector<float> host(n);
  GLM_CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(float),
                            cudaMemcpyDeviceToHost));
  return host;
}

bool CheckShape(int rows, int dim, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> x(rows * dim), w(dim), dy(rows * dim);
  for (float& v : x) v = normal(*rng);
  for (float& v : w) v = 1.f + 0.1f * normal(*rng);
  for (float& v : dy) v = normal(*rng);
  const float eps = 1e-5f;
  float *dx_dev = ToDevice(x), *dw_dev = ToDevice(w), *ddy = ToDevice(dy);
  float *y_dev = nullptr, *rstd = nullptr, *dx = nullptr, *dweight = nullptr;
  GLM_CUDA_CHECK(cudaMalloc(&y_dev, x.size() * sizeof(float)));
  GLM_CUDA_CHECK(cudaMalloc(&rstd, rows * sizeof(float)));
  GLM_CUDA_CHECK(cudaMalloc(&dx, x.size() * sizeof(float)));
  GLM_CUDA_CHECK(cudaMalloc(&dweight, dim * sizeof(float)));
  GLM_CUDA_CHECK(cudaMemset(dweight, 0, dim * sizeof(float)));
  glm::cuda::RmsNormForward(dx_dev, dw_dev, y_dev, rstd, rows, dim, eps, 0);
  glm::cuda::RmsNormBackward(ddy, dx_dev, dw_dev, rstd, dx, dweight, rows, dim,
                             0);
  GLM_CUDA_CHECK(cudaDeviceSynchronize());
  const Reference ref = CpuReference(x, w, dy, rows, dim, eps);
  const double e_y = Nmse(ToHost(y_dev, x.size()), ref.y);
  const double e_dx = Nmse(ToHost(dx, x.size()), ref.dx);
  const double e_dw = Nmse(ToHost(dweight, dim), ref.dweight);
  for (float* p : {dx_dev, dw_dev, ddy, y_dev, rstd, dx, dweight}) {
    GLM_CUDA_CHECK(cudaFree(p));
  }
  const bool ok = e_y < kTolerance && e_dx < kTolerance && e_dw < kTolerance;
  std::printf(
      "rms_norm rows=%-5d dim=%-5d nmse y=%.2e dx=%.2e dweight=%.2e %s\n", rows,
      dim, e_y, e_dx, e_dw, ok ? "OK" : "FAIL");
  return ok;
}

}  // namespace

int main() {
  std::mt19937 rng(std::random_device{}());
  bool ok = true;
  for (auto [rows, dim] :
       {std::pair{1, 7}, {33, 64}, {512, 2048}, {4096, 512}}) {
    ok &= CheckShape(rows, dim, &rng);
  }
  return ok ? 0 : 1;
}

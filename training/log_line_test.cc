#include "training/log_line.h"

#include "gtest/gtest.h"

namespace glm {
namespace {

TEST(LogLineTest, HasMegatronFields) {
  v1::StepMetrics m;
  m.set_iteration(3);
  m.set_train_iters(100);
  m.set_consumed_samples(96);
  m.set_step_time_ms(1234.5);
  m.set_tflops_per_device(54.595);
  m.set_learning_rate(3e-4);
  m.set_lm_loss(6.385243);
  m.set_grad_norm(0.796);
  m.set_skipped_iterations(1);
  m.set_peak_memory_bytes(81000LL * 1024 * 1024);
  const std::string line = FormatLogLine(m, 32);
  for (const char* field :
       {"iteration        3/     100", "consumed samples:           96",
        "elapsed time per iteration (ms): 1234.5",
        "throughput per GPU (TFLOP/s/GPU): 54.595",
        "learning rate: 3.000000E-04", "global batch size:    32",
        "lm loss: 6.385243E+00", "grad norm: 0.796",
        "number of skipped iterations:   1", "number of nan iterations:   0",
        "peak memory (MiB): 81000"}) {
    EXPECT_NE(line.find(field), std::string::npos) << field << "\n" << line;
  }
}

}  // namespace
}  // namespace glm

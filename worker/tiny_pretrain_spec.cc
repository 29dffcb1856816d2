#include "worker/tiny_pretrain_spec.h"

namespace glm {

v1::JobSpec TinyPretrainSpec(const std::string& data,
                             const std::string& save_dir, int world_size,
                             int train_iters) {
  v1::JobSpec spec;
  spec.set_name("failure-e2e");
  spec.set_device("cpu");
  spec.mutable_model()->set_preset("glm5.2-tiny");
  spec.mutable_parallel()->set_world_size(world_size);
  v1::TrainingSpec& t = *spec.mutable_training();
  t.set_mode(v1::PRETRAIN);
  t.set_train_iters(train_iters);
  t.set_lr(3e-3);
  t.set_min_lr(3e-4);
  t.set_warmup_iters(2);
  t.set_global_batch_size(4);
  t.set_micro_batch_size(2);
  t.set_seq_length(32);
  t.set_seed(11);
  t.set_save_dir(save_dir);
  v1::DatasetSource& source = *spec.mutable_data()->add_sources();
  source.set_path(data);
  source.set_weight(1.0);
  spec.mutable_data()->set_tokenizer("byte");
  spec.mutable_data()->set_data_seed(4);
  return spec;
}

}  // namespace glm

#!/usr/bin/env bash
# Writes the seeds of coordinator_rpc_fuzzer (corpus/coordinator_rpc_fuzzer/):
# each is one byte choosing the handler (the fuzzer's Dispatch numbers them)
# followed by the request in protobuf's binary form, encoded by protoc from the
# text written here. Job ids use the tag 000000, which the fuzzer maps to its
# store's. Run from the repository root; a seed a finding left (*_crash) is
# written here too, so that this list stays the whole corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
out=fuzz/corpus/coordinator_rpc_fuzzer
mkdir -p "$out"
seed() {
  local name=$1 selector=$2 message=$3 text=$4
  {
    printf "\\x$(printf %02x "$selector")"
    printf '%s' "$text" | protoc -I. --encode="glm.v1.$message" \
      proto/job_service.proto proto/worker_service.proto \
      proto/rendezvous_service.proto
  } >"$out/$name"
}
spec='name: "tiny-pretrain" device: "cpu" model { preset: "glm5.2-tiny" } parallel { world_size: 2 tp: 1 pp: 2 layout: "Etttttt|ttmL" } training { mode: PRETRAIN train_iters: 20 lr: 0.001 min_lr: 0.0001 warmup_iters: 2 global_batch_size: 4 micro_batch_size: 1 seq_length: 64 seed: 1234 max_restarts: 1 } data { sources { path: "data/tiny_text_document" weight: 1.0 } tokenizer: "byte" }'
seed submit_tiny_job 0 SubmitJobRequest "spec { $spec }"
seed submit_gpu_job 0 SubmitJobRequest "spec { ${spec/\"cpu\"/\"cuda\"} }"
seed submit_empty 0 SubmitJobRequest ""
seed get_job 1 GetJobRequest 'id: "job-000000-000001"'
seed get_unknown_job 1 GetJobRequest 'id: "job-000000-999999"'
seed list_running 2 ListJobsRequest 'states: SCHEDULED states: RUNNING full_manifests: true'
seed list_all 2 ListJobsRequest ''
seed cancel_job 3 CancelJobRequest 'id: "job-000000-000001" reason: "fuzz"'
seed cancel_unknown_job 3 CancelJobRequest 'id: "nope"'
seed list_checkpoints 4 ListCheckpointsRequest 'job_id: "job-000000-000001"'
seed register_cpu 5 RegisterWorkerRequest 'hostname: "h" device_kind: CPU cpu_cores: 2'
seed register_unspecified 5 RegisterWorkerRequest 'hostname: "h"'
seed heartbeat_rank 6 HeartbeatRequest 'worker_id: "worker-1.1" job_id: "job-000000-000001" iteration: 3'
seed heartbeat_idle 6 HeartbeatRequest 'worker_id: "worker-1.2"'
seed heartbeat_unknown 6 HeartbeatRequest 'worker_id: "worker-9.9"'
seed metrics_rank 7 ReportMetricsRequest 'worker_id: "worker-1.1" job_id: "job-000000-000001" rank: 0 metrics { iteration: 1 train_iters: 20 lm_loss: 5.5 learning_rate: 0.001 }'
seed checkpoint 8 ReportCheckpointRequest 'worker_id: "worker-1.1" manifest { job_id: "job-000000-000001" iteration: 10 directory: "/tmp/ckpt" kind: "full" world_size: 2 }'
seed result_ok 9 ReportJobResultRequest 'worker_id: "worker-1.1" job_id: "job-000000-000001" rank: 0 attempt: 1 ok: true'
seed result_failed 9 ReportJobResultRequest 'worker_id: "worker-1.2" job_id: "job-000000-000001" rank: 1 attempt: 1 message: "oom"'
seed result_wrong_attempt 9 ReportJobResultRequest 'worker_id: "worker-1.1" job_id: "job-000000-000001" attempt: 7 ok: true'
seed deregister 10 DeregisterWorkerRequest 'worker_id: "worker-1.1"'
seed rendezvous_set 11 RendezvousSetRequest 'scope: "fuzz-scope" key: "k" value: "v"'
seed rendezvous_set_no_scope 11 RendezvousSetRequest 'key: "k" value: "v"'
seed rendezvous_get 12 RendezvousGetRequest 'scope: "fuzz-scope" key: "counter"'
seed rendezvous_wait_set 13 RendezvousWaitRequest 'scope: "fuzz-scope" keys: "counter" keys: "text" timeout_ms: 1000'
seed rendezvous_wait_missing 13 RendezvousWaitRequest 'scope: "fuzz-scope" keys: "absent" timeout_ms: 1000'
seed rendezvous_wait_no_timeout 13 RendezvousWaitRequest 'scope: "fuzz-scope" keys: "counter"'
seed rendezvous_add 14 RendezvousAddRequest 'scope: "fuzz-scope" key: "counter" delta: 3'
seed rendezvous_add_new 14 RendezvousAddRequest 'scope: "fuzz-scope" key: "fresh" delta: -2'
seed rendezvous_add_text 14 RendezvousAddRequest 'scope: "fuzz-scope" key: "text" delta: 1'
seed rendezvous_add_overflow_crash 14 RendezvousAddRequest 'scope: "fuzz-scope" key: "counter" delta: 9223372036854775807'

#!/usr/bin/env bash
# deploy/slurm/train.sbatch on a real slurm: Debian's munged, slurmctld and
# slurmd as a one-node cluster on loopback (configuration, key and sockets in
# a temporary folder; nothing of the machine's own slurm or munge is used).
# Submits the script in CPU mode with a two-rank job and checks that slurm
# records it COMPLETED, with a checkpoint, an HF export and TensorBoard event
# files; then a job whose ranks fail, which slurm must record FAILED, with no
# glm process left behind. Needs root and tools/bootstrap.sh's packages.
#   deploy/tests/slurm_test.sh BIN_DIR   (glm-coordinator, glm-worker, glmctl)
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/tests/lib.sh
bin=$(require_binaries "${1:-}")

dir=$(mktemp -d /tmp/glm-slurm.XXXXXX)
chmod 700 "$dir"
pids=()
cleanup() {
  local status=$?
  ((status == 0)) || show_logs "$dir"/*.log "$dir"/*/logs/*.log
  stop_processes "${pids[@]}"
  rm -rf "$dir"
  exit "$status"
}
trap cleanup EXIT

# munge: a key of our own, the daemon on a socket in $dir.
dd if=/dev/urandom of="$dir/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge.key"
munged --force --foreground --key-file="$dir/munge.key" --socket="$dir/munge.sock" \
  --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
  --seed-file="$dir/munged.seed" &
pids+=($!)
wait_for "munged" 20 test -S "$dir/munge.sock"

# Ports outside the usual 6817/6818, in case the machine runs a slurm of its own.
cpus=$(nproc)
cat > "$dir/slurm.conf" <<EOF
ClusterName=glmci
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=16817
SlurmdPort=16818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
MpiDefault=none
ReturnToService=2
NodeName=glmnode NodeAddr=127.0.0.1 NodeHostname=$(hostname) CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=glmnode Default=YES MaxTime=30 State=UP OverSubscribe=NO
EOF
mkdir -p "$dir/state" "$dir/spool"
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -i &
pids+=($!)
slurmd -D -N glmnode &
pids+=($!)
wait_for "slurm node glmnode idle" 60 \
  bash -c 'sinfo -h -n glmnode -o %t 2>/dev/null | grep -q idle'

# Runs train.sbatch on SPEC in CPU mode with two ranks, waits for it to end,
# and prints slurm's final state of it.
run_sbatch() {
  local spec=$1 state_dir=$2 job
  job=$(GLM_DEVICE=cpu GLM_BIN=$bin GLM_STATE_DIR=$state_dir \
    sbatch --parsable --nodes=1 --ntasks-per-node=2 --time=10 \
      --output="$state_dir.out" deploy/slurm/train.sbatch "$spec")
  wait_for "slurm job $job to end" 240 \
    bash -c "grep -q '^JobId=$job .*EndTime=[0-9]' '$dir/jobcomp.txt' 2>/dev/null"
  sed -n "s/^JobId=$job .*JobState=\([A-Z_]*\).*/\1/p" "$dir/jobcomp.txt"
}

state=$dir/good
state_of=$(run_sbatch deploy/tests/two_rank_job.json "$state")
cat "$state.out"
expect_equal "slurm's state of the training job" COMPLETED "$state_of"
expect_file "$state/checkpoints/iter_0000006/manifest.json"
expect_file "$state/hf-export/model-00001-of-00001.safetensors"
expect_file "$state/hf-export/config.json"
# One progress line per step (glmctl watch), not one per rank.
steps=$(grep -o '^job-.* step [0-9]*/6 ' "$state.out" | grep -o 'step [0-9]*' || true)
expect_equal "repeated progress lines" "" "$(sort <<< "$steps" | uniq -d)"
expect_equal "last progress line" "step 6" "$(tail -n 1 <<< "$steps")"
tools_python metrics_log/read_step_metrics.py "$state/checkpoints/metrics" 6

# A rank that cannot open its dataset fails the job: slurm must say FAILED,
# and the script must stop the coordinator and the workers on its way out.
# (The missing dataset lies under the path roots, GLM_STATE_DIR, so that the
# coordinator takes the job and the ranks fail opening it.)
state=$dir/bad
sed "s|\"path\": \"data/corpus/english_text.jsonl\"|\"path\": \"$state/nonexistent/dataset\"|" \
  deploy/tests/two_rank_job.json > "$dir/failing_job.json"
state_of=$(run_sbatch "$dir/failing_job.json" "$state")
cat "$state.out"
expect_equal "slurm's state of the failing job" FAILED "$state_of"
grep -q "FAILED" "$state.out" || fail "the job's failure is not in the output"
# (The bracket keeps pgrep from matching this very command line.)
wait_for "no glm process left" 30 bash -c "! pgrep -f '$bin/glm-[cw]' >/dev/null"
echo "slurm_test: PASS"

#!/usr/bin/env python3
"""CPU step time and per-worker CPU time of small parallel jobs.

Runs `glmctl local` on variants of examples/pretrain.json (glm5.2-tiny, global
batch 16, micro batch 2, seq 256, 8 iterations, no checkpoints), each variant
once per round, and prints for each run: the mean step time of iterations 2-8
from the rank-0 log, the final lm loss, and the CPU seconds (user + sys) of
each glm-worker process, sampled from /proc while the job runs.

usage (from the repository root, after
`bazel build //cli:glmctl //worker:glm-worker`; GLMCTL and GLM_WORKER name
other binaries, BENCH_CORES splits that many cores among a variant's workers):
  bench/parallel_local_bench.py [ROUNDS] [VARIANT...] [seq=N] [gbs=N] [mbs=N]
(seq, gbs, mbs override the sequence length, global and micro batch sizes.)
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

# name: (world size, pp, layout)
VARIANTS = {
    'pp1': (1, 1, None),
    'pp2': (2, 2, 'Etttttt|ttmL'),
    'pp2_front': (2, 2, 'Ett|ttttttmL'),
    'pp2_vpp2': (2, 2, 'Et|t|tttt|ttmL'),
    'dp2': (2, 1, None),
    'dp4': (4, 1, None),
    'ep2': (2, 1, None),
    'tp2': (2, 1, None),
    'cp2': (2, 1, None),
    'tp2_cp2': (4, 1, None),
}
# Expert-parallel size of the variants that split the routed experts.
EXPERT_PARALLEL = {'ep2': 2}
# (tp, cp) of the variants that split each micro batch's tokens.
TOKEN_PARALLEL = {'tp2': (2, 1), 'cp2': (1, 2), 'tp2_cp2': (2, 2)}
GLMCTL = os.environ.get('GLMCTL', 'bazel-bin/cli/glmctl')
WORKER = os.path.realpath(
    os.environ.get('GLM_WORKER', 'bazel-bin/worker/glm-worker'))
# Cores to share among a variant's workers (GLM_CPU_THREADS = cores / world
# size each); unset: every worker sizes its pool to the machine.
CORES = int(os.environ.get('BENCH_CORES', '0'))
TICK = os.sysconf('SC_CLK_TCK')


# Batch shape of every variant; `key=value` arguments override it.
SHAPE = {'seq': 256, 'gbs': 16, 'mbs': 2}


def job_spec(name, folder):
    world, pp, layout = VARIANTS[name]
    with open('examples/pretrain.json') as f:
        spec = json.load(f)
    spec['name'] = 'bench-' + name
    tp, cp = TOKEN_PARALLEL.get(name, (1, 1))
    spec['parallel'].update(worldSize=world, pp=pp,
                            ep=EXPERT_PARALLEL.get(name, 1), tp=tp, cp=cp)
    if layout:
        spec['parallel']['layout'] = layout
    spec['training'].update(trainIters=8, globalBatchSize=SHAPE['gbs'],
                            microBatchSize=SHAPE['mbs'],
                            seqLength=SHAPE['seq'])
    for key in ('saveDir', 'saveInterval', 'exportHfDir'):
        spec['training'].pop(key, None)
    path = os.path.join(folder, name + '.json')
    with open(path, 'w') as f:
        json.dump(spec, f)
    return path


def worker_cpu_seconds(parent):
    """CPU seconds of each glm-worker child of `parent`, by pid."""
    seconds = {}
    for pid in os.listdir('/proc'):
        if not pid.isdigit():
            continue
        try:
            if os.path.realpath(f'/proc/{pid}/exe') != WORKER:
                continue
            with open(f'/proc/{pid}/stat') as f:
                fields = f.read().rsplit(')', 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent:
            seconds[pid] = (int(fields[11]) + int(fields[12])) / TICK
    return seconds


def run(name, folder):
    log_path = os.path.join(folder, name + '.log')
    env = dict(os.environ, OPENBLAS_NUM_THREADS='1')
    if CORES:
        env['GLM_CPU_THREADS'] = str(max(1, CORES // VARIANTS[name][0]))
    with open(log_path, 'w') as log:
        job = subprocess.Popen(
            [GLMCTL, 'local', '--job=' + job_spec(name, folder),
             '--worker-binary=' + WORKER,
             '--state-dir=' + os.path.join(folder, 'state-' + name)],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        cpu, load = {}, 0.0
        while job.poll() is None:
            cpu.update(worker_cpu_seconds(job.pid))
            with open('/proc/loadavg') as f:
                load = max(load, float(f.read().split()[0]))
            time.sleep(0.1)
    with open(log_path) as f:
        text = f.read()
    steps = [float(ms) for it, ms in re.findall(
        r'iteration +(\d+)/ +\d+ .*?per iteration \(ms\): ([0-9.]+)', text)
             if int(it) >= 2]
    losses = re.findall(r'lm loss: ([0-9.E+-]+) \|', text)
    if not steps or job.returncode != 0:
        sys.exit(f'{name}: the job failed, see {log_path}')
    ranks = sorted(cpu.values(), reverse=True)
    print(f'{name:10s} step {sum(steps) / len(steps):6.0f} ms  final lm '
          f'{losses[-1]}  worker cpu s {" / ".join("%.2f" % c for c in ranks)}'
          f' (total {sum(ranks):.2f})  load {load:.1f}', flush=True)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    names = [a for a in sys.argv[2:] if '=' not in a] or list(VARIANTS)
    for arg in sys.argv[2:]:
        if '=' in arg:
            key, value = arg.split('=', 1)
            if key not in SHAPE:
                sys.exit(f'{arg}: unknown setting (known: {", ".join(SHAPE)})')
            SHAPE[key] = int(value)
    with tempfile.TemporaryDirectory(prefix='parallel-bench-') as folder:
        for _ in range(rounds):
            for name in names:
                run(name, folder)


if __name__ == '__main__':
    main()

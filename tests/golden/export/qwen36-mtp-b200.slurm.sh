#!/bin/bash
# orch export slurm qwen36-mtp-b200: from profiles/qwen36-mtp-b200.yaml
# SGLang 0.5.11, launch digest baed78af1d67. Re-export instead of editing;
# orch diff-effective qwen36-mtp-b200 --url URL checks a running server against it.
# note: program: python3 -m sglang.launch_server on the cluster's nodes (export.python) (the host's interpreter is /opt/venvs/sglang-0.5.11/bin/python)
# note: gpu.devices 0: slurm picks the GPUs (CUDA_VISIBLE_DEVICES is not exported; the GPU count is requested instead)
# note: model.path /models/Qwen3.6-27B must exist where the server runs (mount a volume there, or use a Hugging Face model id)
# note: CPUs and memory: Slurm's defaults for one task per node (often 1 CPU); --exclusive gives each rank its whole node
# note: stop: TERM 30 s (stop_timeout_s) before the time limit; scancel sends TERM at once and SIGKILL after the cluster's KillWait (a rank that ignores TERM, as SGLang >= 0.5.21 ranks >= 1 do, lives until then)
# note: ports: one server per node (--ntasks-per-node=1), so SGLang's own free-port probes (nccl_port) do not race; the ports the profile pins are carried as written
# note: restart: Slurm runs the server once; restart.* is orch's supervisor's
#SBATCH --job-name=qwen36-mtp-b200
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=1
#SBATCH --signal=TERM@30
set -euo pipefail
# One step, one task per node. The payload is single-quoted: each task reads its own
# SLURM_NODEID; the batch shell expands nothing in it. exec: the job's exit is srun's.
# shellcheck disable=SC2016
exec srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'set -eu
export SGLANG_ENABLE_SPEC_V2=1
exec python3 -m sglang.launch_server \
    --model-path /models/Qwen3.6-27B \
    --host 0.0.0.0 \
    --port 30000 \
    --speculative-algorithm EAGLE \
    --speculative-num-steps 3 \
    --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4 \
    --context-length 8192 \
    --trust-remote-code \
    --reasoning-parser qwen3 \
    --mamba-scheduler-strategy extra_buffer \
    --max-mamba-cache-size 24 \
    --mamba-full-memory-ratio 0.4 \
    --mem-fraction-static 0.92
'

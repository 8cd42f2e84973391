#!/bin/bash
# orch export slurm qwen36-mtp-rtxpro6000-tp4: from profiles/qwen36-mtp-rtxpro6000-tp4.yaml
# SGLang 0.5.23, launch digest ef50d708f430. Re-export instead of editing;
# orch diff-effective qwen36-mtp-rtxpro6000-tp4 --url URL checks a running server against it.
# note: program: sglang serve on the cluster's nodes (export.python) (the host's interpreter is /opt/venvs/sglang-0.5.23/bin/python)
# note: gpu.devices 0,1,2,3: slurm picks the GPUs (CUDA_VISIBLE_DEVICES is not exported; the GPU count is requested instead)
# note: secrets: export HF_TOKEN in the shell that runs sbatch (the job inherits it; the script checks each is set and never holds a value)
# note: CPUs and memory: Slurm's defaults for one task per node (often 1 CPU); --exclusive gives each rank its whole node
# note: stop: TERM 30 s (stop_timeout_s) before the time limit; scancel sends TERM at once and SIGKILL after the cluster's KillWait (a rank that ignores TERM, as SGLang >= 0.5.21 ranks >= 1 do, lives until then)
# note: ports: one server per node (--ntasks-per-node=1), so SGLang's own free-port probes (nccl_port) do not race; the ports the profile pins are carried as written
# note: restart: Slurm runs the server once; restart.* is orch's supervisor's
#SBATCH --job-name=qwen36-mtp-rtxpro6000-tp4
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH --signal=TERM@30
set -euo pipefail
: "${HF_TOKEN:?orch export: HF_TOKEN is not set: export it where you run sbatch}"
# One step, one task per node. The payload is single-quoted: each task reads its own
# SLURM_NODEID; the batch shell expands nothing in it. exec: the job's exit is srun's.
# shellcheck disable=SC2016
exec srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'set -eu
exec sglang serve \
    --model-path Qwen/Qwen3.6-27B \
    --served-model-name qwen3.6-27b \
    --host 0.0.0.0 \
    --port 30000 \
    --speculative-algorithm EAGLE \
    --speculative-num-steps 3 \
    --speculative-eagle-topk 1 \
    --speculative-num-draft-tokens 4 \
    --context-length 32768 \
    --trust-remote-code \
    --reasoning-parser qwen3 \
    --tp-size 4 \
    --mamba-radix-cache-strategy extra_buffer \
    --mem-fraction-static 0.88
'

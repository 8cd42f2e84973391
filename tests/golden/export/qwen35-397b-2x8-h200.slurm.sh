#!/bin/bash
# orch export slurm qwen35-397b-2x8-h200: from profiles/qwen35-397b-2x8-h200.yaml
# SGLang 0.5.23, launch digest adddadae8b55. Re-export instead of editing;
# orch diff-effective qwen35-397b-2x8-h200 --url URL checks a running server against it.
# note: program: sglang serve on the cluster's nodes (export.python) (the host's interpreter is /opt/venvs/sglang-0.5.23/bin/python)
# note: gpu.devices 0,1,2,3,4,5,6,7: slurm picks the GPUs (CUDA_VISIBLE_DEVICES is not exported; the GPU count is requested instead)
# note: group.gated_launch: off (orch's supervisor opens SGLang's gate; none runs under slurm: the ranks rendezvous directly)
# note: model.path /models/Qwen3.5-397B-A17B must exist where the server runs (mount a volume there, or use a Hugging Face model id)
# note: CPUs and memory: Slurm's defaults for one task per node (often 1 CPU); --exclusive gives each rank its whole node
# note: stop: TERM 30 s (stop_timeout_s) before the time limit; scancel sends TERM at once and SIGKILL after the cluster's KillWait (a rank that ignores TERM, as SGLang >= 0.5.21 ranks >= 1 do, lives until then)
# note: ports: one server per node (--ntasks-per-node=1), so SGLang's own free-port probes (nccl_port) do not race; the ports the profile pins are carried as written
# note: restart: Slurm runs the server once; restart.* is orch's supervisor's
#SBATCH --job-name=qwen35-397b-2x8-h200
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=8
#SBATCH --signal=TERM@30
set -euo pipefail
# The head (rank 0) is the job's first node; its address is asked of the node
# itself: node names need not resolve, SLURM_LAUNCH_NODE_IPADDR is not the head.
nodes=$(scontrol show hostnames "${SLURM_JOB_NODELIST}")
ORCH_SLURM_HEAD_NODE=${nodes%%$'\n'*}
addresses=$(srun --overlap --nodes=1 --ntasks=1 --nodelist="${ORCH_SLURM_HEAD_NODE}" hostname -I)
read -r ORCH_SLURM_HEAD_ADDR _ <<<"${addresses}"
: "${ORCH_SLURM_HEAD_ADDR:?orch export: no address from hostname -I on ${ORCH_SLURM_HEAD_NODE}}"
case "${ORCH_SLURM_HEAD_ADDR}" in *:*) ORCH_SLURM_HEAD_ADDR="[${ORCH_SLURM_HEAD_ADDR}]" ;; esac
export ORCH_SLURM_HEAD_NODE ORCH_SLURM_HEAD_ADDR
# One step, one task per node. The payload is single-quoted: each task reads its own
# SLURM_NODEID; the batch shell expands nothing in it. exec: the job's exit is srun's.
# shellcheck disable=SC2016
exec srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --kill-on-bad-exit=1 bash -c 'set -eu
if [ "${SLURM_NODEID}" = 0 ] && [ "${SLURMD_NODENAME}" != "${ORCH_SLURM_HEAD_NODE}" ]; then echo "orch export: SLURM_NODEID 0 is not on the head node the batch script found" >&2; exit 2; fi
export NCCL_IB_DISABLE=0
case "${SLURM_NODEID}" in
  0)
    export NCCL_SOCKET_IFNAME=ens1f0
    export GLOO_SOCKET_IFNAME=ens1f0
    ;;
  1)
    export NCCL_SOCKET_IFNAME=ens2f0
    export GLOO_SOCKET_IFNAME=ens2f0
    ;;
  *) echo '"'"'orch export: qwen35-397b-2x8-h200 has ranks 0-1, not '"'"'"${SLURM_NODEID}" >&2; exit 2 ;;
esac
exec sglang serve \
    --model-path /models/Qwen3.5-397B-A17B \
    --host 0.0.0.0 \
    --port 30000 \
    --tp-size 16 \
    --mem-fraction-static 0.85 \
    --trust-remote-code \
    --dist-init-addr "${ORCH_SLURM_HEAD_ADDR}:20000" \
    --nnodes "${SLURM_JOB_NUM_NODES}" \
    --node-rank "${SLURM_NODEID}"
'

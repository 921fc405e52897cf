#!/usr/bin/env bash
# Launches the plan on 4 GPU(s) per node × 2 node(s) = 8 GPU(s).
# Usage: ./launch.sh [trl|hf] [torchrun|accelerate] DATASET [script args...]
#   trl: train_trl.py (TRL SFTTrainer); hf: train_hf.py (Trainer + PEFT)
#   DATASET: a JSON Lines file with a "text" field, or a Hub dataset id
# Run it on every node with NODE_RANK (0..1) and MASTER_ADDR (node 0's address) set;
# MASTER_PORT defaults to 29500.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
stack=${1:?usage: ./launch.sh [trl|hf] [torchrun|accelerate] DATASET}
launcher=${2:?usage: ./launch.sh [trl|hf] [torchrun|accelerate] DATASET}
dataset=${3:?usage: ./launch.sh [trl|hf] [torchrun|accelerate] DATASET}
shift 3
case "$stack" in
trl) script="$here/train_trl.py" ;;
hf) script="$here/train_hf.py" ;;
*) echo "launch.sh: stack must be trl or hf, got $stack" >&2; exit 2 ;;
esac
case "$launcher" in
torchrun) exec torchrun --nnodes=2 --nproc_per_node=4 --node_rank="${NODE_RANK:?set NODE_RANK}" --master_addr="${MASTER_ADDR:?set MASTER_ADDR}" --master_port="${MASTER_PORT:-29500}" "$script" --dataset "$dataset" "$@" ;;
accelerate) exec accelerate launch --config_file "$here/accelerate_config.yaml" --machine_rank "${NODE_RANK:?set NODE_RANK}" --main_process_ip "${MASTER_ADDR:?set MASTER_ADDR}" --main_process_port "${MASTER_PORT:-29500}" "$script" --dataset "$dataset" "$@" ;;
*) echo "launch.sh: launcher must be torchrun or accelerate, got $launcher" >&2; exit 2 ;;
esac

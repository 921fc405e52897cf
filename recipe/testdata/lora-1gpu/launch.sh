#!/usr/bin/env bash
# Launches the plan on 1 GPU(s) per node × 1 node(s) = 1 GPU(s).
# Usage: ./launch.sh [trl|hf] [torchrun|accelerate] DATASET [script args...]
#   trl: train_trl.py (TRL SFTTrainer); hf: train_hf.py (Trainer + PEFT)
#   DATASET: a JSON Lines file with a "text" field, or a Hub dataset id
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
torchrun) exec torchrun --standalone --nnodes=1 --nproc_per_node=1 "$script" --dataset "$dataset" "$@" ;;
accelerate) exec accelerate launch --config_file "$here/accelerate_config.yaml" "$script" --dataset "$dataset" "$@" ;;
*) echo "launch.sh: launcher must be torchrun or accelerate, got $launcher" >&2; exit 2 ;;
esac

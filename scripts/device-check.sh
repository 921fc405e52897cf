#!/usr/bin/env bash
# device-check.sh: run a prepared set of bench probes on one GPU (sized for an
# H200, about 140 GiB) in under 8 minutes, and leave their receipts, the cases
# they convert to and a summary in $OUT (or ./out).
#
# The machine it targets has PyTorch, transformers, PEFT and accelerate, no
# internet and maybe no Go. So:
#   - models are built with --random-init from the config.json copies in
#     scripts/device-configs/ (memory does not depend on weight values);
#   - the probes run through the canifinetune binary, so the receipts are the
#     real Go receipts. The binary is cross-built HERE (CGO_ENABLED=0, linux/amd64)
#     into scripts/bin/ by `scripts/device-check.sh --build`, and carried along
#     (scripts/bin is git-ignored). If it is missing there and Go is present, the
#     script builds it; if neither, it stops and says so;
#   - bitsandbytes (QLoRA, 8-bit optimizers) is imported from an unpacked copy
#     carried in scripts/bnb-site/ (git-ignored: a wheel unzipped there, with
#     only the libbitsandbytes_cuda*.so that the device's torch needs, since the
#     whole wheel is 43 MB and the tree that travels may be 64 MiB), or installed
#     from wheels carried in scripts/wheels/*.whl; otherwise the QLoRA probes
#     are skipped and summary.txt says why.
#
# Usage:
#   scripts/device-check.sh --build        # here: cross-build scripts/bin/canifinetune
#   scripts/device-check.sh --dry-run      # print what would run, run nothing
#   scripts/device-check.sh [--bundle]     # run; --bundle packs receipts into
#                                          # receipts.tar (the device tool returns
#                                          # at most 8 files from $OUT)
# On the H200 (2026-12-04) the 13 probes without QLoRA took 376 s and the two
# QLoRA ones 222 s, over one device call's 10 minutes together: run the set in
# two calls, ONLY='^(q05|l1b|q15-(lora|full)|l3b-(lora|full)|q7b)' and then
# ONLY=qlora (three probes, Gemma 3's included).
# Environment: OUT (output folder, default ./out), BUDGET_S (stop starting
# probes after this many seconds, default 360), PROBE_TIMEOUT (per probe,
# default 90s; budget + one timeout stays under 8 minutes), QLORA_TIMEOUT (a
# QLoRA probe's: it saves and reloads a random checkpoint, which took 74 s for
# Qwen2.5-1.5B on the H200 machine; default 170s), ONLY (an extended regular expression: run
# only the probes whose name matches it), PYTHON (default python3).
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0 bundle=0 build=0
for a in "$@"; do
	case "$a" in
	--dry-run) dry=1 ;;
	--bundle) bundle=1 ;;
	--build) build=1 ;;
	-h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "device-check: unknown argument $a (try --help)" >&2; exit 2 ;;
	esac
done

BIN=scripts/bin/canifinetune
OUT=${OUT:-./out}
BUDGET_S=${BUDGET_S:-360}
PROBE_TIMEOUT=${PROBE_TIMEOUT:-90s}
QLORA_TIMEOUT=${QLORA_TIMEOUT:-170s}
PYTHON=${PYTHON:-python3}
ONLY=${ONLY:-}
CFG=scripts/device-configs

if [ "$build" = 1 ]; then
	mkdir -p scripts/bin
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -o "$BIN" ./cmd/canifinetune || exit 1
	echo "built $BIN (linux/amd64, CGO_ENABLED=0)"
	exit 0
fi

# The probes: name | config dir | Hugging Face id | flags. Ordered so that the
# cheap ones and the OOM case run first; the budget check skips the tail if the
# machine is slow. Sizes were chosen from the estimate's own terms on a 140 GiB
# card: activations (seq_len × batch × layers), the logits chain
# (seq_len × batch × vocab × ~14 B, unaffected by checkpointing), and full
# training's weights + grads + optimizer states. No paged optimizer: its states
# live in CUDA managed memory, which torch's counters do not see and which the
# device machine's notes warn can hang the GPU when oversubscribed.
PROBES=(
	"q05-lora-s1024-b1|Qwen2.5-0.5B|Qwen/Qwen2.5-0.5B|--method lora --rank 16 --seq-len 1024 --batch 1"
	"q05-lora-all-s4096-b4|Qwen2.5-0.5B|Qwen/Qwen2.5-0.5B|--method lora --rank 16 --targets all-linear --seq-len 4096 --batch 4"
	"q05-full-s2048-b2|Qwen2.5-0.5B|Qwen/Qwen2.5-0.5B|--method full --seq-len 2048 --batch 2"
	"q05-full-mixed-s1024-b1|Qwen2.5-0.5B|Qwen/Qwen2.5-0.5B|--method full --precision bf16-mixed --seq-len 1024 --batch 1"
	"q05-lora-oom-s8192-b32|Qwen2.5-0.5B|Qwen/Qwen2.5-0.5B|--method lora --rank 16 --seq-len 8192 --batch 32"
	"l1b-lora-s2048-b2|Llama-3.2-1B|meta-llama/Llama-3.2-1B|--method lora --rank 16 --seq-len 2048 --batch 2"
	"l1b-lora-ckpt-s4096-b4|Llama-3.2-1B|meta-llama/Llama-3.2-1B|--method lora --rank 16 --grad-ckpt full --seq-len 4096 --batch 4"
	"q15-lora-ckpt-s2048-b4|Qwen2.5-1.5B|Qwen/Qwen2.5-1.5B|--method lora --rank 16 --grad-ckpt full --seq-len 2048 --batch 4"
	"q15-full-s2048-b2|Qwen2.5-1.5B|Qwen/Qwen2.5-1.5B|--method full --seq-len 2048 --batch 2"
	"l3b-lora-s2048-b2|Llama-3.2-3B|meta-llama/Llama-3.2-3B|--method lora --rank 16 --seq-len 2048 --batch 2"
	"l3b-full-fused-s1024-b1|Llama-3.2-3B|meta-llama/Llama-3.2-3B|--method full --optimizer adamw_torch_fused --seq-len 1024 --batch 1"
	"q7b-lora-ckpt-s2048-b1|Qwen2.5-7B|Qwen/Qwen2.5-7B|--method lora --rank 16 --grad-ckpt full --seq-len 2048 --batch 1"
	"q7b-full-s1024-b1|Qwen2.5-7B|Qwen/Qwen2.5-7B|--method full --seq-len 1024 --batch 1"
	"q15-qlora-s2048-b2|Qwen2.5-1.5B|Qwen/Qwen2.5-1.5B|--method qlora --rank 16 --targets all-linear --seq-len 2048 --batch 2"
	"l3b-qlora-8bit-s2048-b2|Llama-3.2-3B|meta-llama/Llama-3.2-3B|--method qlora --rank 16 --optimizer adamw_8bit --seq-len 2048 --batch 2"
	# Gemma 3 past its 512-token window without autocast: the sliding layers on
	# the memory-efficient kernel, the full ones (one in six) on SDPA's math kernel.
	"g3-1b-qlora-s8192-b2|gemma-3-1b-pt|google/gemma-3-1b-pt|--method qlora --rank 16 --seq-len 8192 --batch 2"
)

run() { # print the command; run it unless --dry-run
	echo "+ $*"
	[ "$dry" = 1 ] || "$@"
}

summary=/dev/stdout
if [ "$dry" = 0 ]; then
	mkdir -p "$OUT/receipts" || exit 1
	summary="$OUT/summary.txt"
	: >"$summary"
	: >"$OUT/cases.jsonl"
fi

if [ ! -x "$BIN" ]; then
	if command -v go >/dev/null 2>&1; then
		run env CGO_ENABLED=0 go build -o "$BIN" ./cmd/canifinetune || exit 1
	elif [ "$dry" = 1 ]; then
		echo "# $BIN is missing: build it with scripts/device-check.sh --build and carry scripts/bin"
	else
		echo "device-check: $BIN is missing and Go is not installed; run scripts/device-check.sh --build where Go is, and carry scripts/bin" >&2
		exit 1
	fi
fi

# bitsandbytes: from carried wheels, else record why QLoRA is skipped.
have_bnb=0
qlora_note=""
if [ "$dry" = 1 ]; then
	have_bnb=1 # not checked: show every probe
elif "$PYTHON" -c 'import bitsandbytes' >/dev/null 2>&1; then
	have_bnb=1
elif [ -d scripts/bnb-site/bitsandbytes ]; then
	export PYTHONPATH="$PWD/scripts/bnb-site${PYTHONPATH:+:$PYTHONPATH}"
	if "$PYTHON" -c 'import bitsandbytes' >/dev/null 2>&1; then
		have_bnb=1
	else
		qlora_note="scripts/bnb-site/bitsandbytes is carried but 'import bitsandbytes' failed: $("$PYTHON" -c 'import bitsandbytes' 2>&1 | tail -1)"
	fi
else
	shopt -s nullglob
	wheels=(scripts/wheels/*.whl)
	shopt -u nullglob
	if [ "${#wheels[@]}" -gt 0 ]; then
		run "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/bnb-site "${wheels[@]}"
		export PYTHONPATH="/tmp/bnb-site${PYTHONPATH:+:$PYTHONPATH}"
		if "$PYTHON" -c 'import bitsandbytes' >/dev/null 2>&1; then
			have_bnb=1
		else
			qlora_note="bitsandbytes wheels in scripts/wheels/ installed but 'import bitsandbytes' failed: $("$PYTHON" -c 'import bitsandbytes' 2>&1 | tail -1)"
		fi
	else
		qlora_note="bitsandbytes is not installed and no wheels were carried in scripts/wheels/*.whl"
	fi
fi

{
	echo "# device-check $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	[ "$dry" = 1 ] || {
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/# gpu: /'
		"$PYTHON" -c 'import sys, importlib
for m in ("torch", "transformers", "peft", "accelerate", "bitsandbytes"):
    try: print("# %s %s" % (m, importlib.import_module(m).__version__))
    except Exception as e: print("# %s missing (%s)" % (m, type(e).__name__))' 2>&1
	}
	[ -n "$qlora_note" ] && echo "# QLoRA and 8-bit probes skipped: $qlora_note"
	printf '%s\t%s\t%s\t%s\n' name exit status peak_reserved_gib
} >>"$summary"

start=$SECONDS
for p in "${PROBES[@]}"; do
	IFS='|' read -r name dir id flags <<<"$p"
	receipt="$OUT/receipts/$name.json"
	if [ -n "$ONLY" ] && ! [[ "$name" =~ $ONLY ]]; then
		continue
	fi
	if [[ "$flags" == *qlora* || "$flags" == *8bit* ]] && [ "$have_bnb" = 0 ]; then
		printf '%s\t-\tskipped\t-\t(%s)\n' "$name" "$qlora_note" >>"$summary"
		continue
	fi
	if [ "$dry" = 0 ] && [ $((SECONDS - start)) -ge "$BUDGET_S" ]; then
		printf '%s\t-\tskipped\t-\t(budget of %ss spent)\n' "$name" "$BUDGET_S" >>"$summary"
		continue
	fi
	[ -f "$CFG/$dir/config.json" ] || { echo "device-check: $CFG/$dir/config.json missing" >&2; exit 1; }
	probe_timeout=$PROBE_TIMEOUT
	[[ "$flags" == *qlora* ]] && probe_timeout=$QLORA_TIMEOUT
	# shellcheck disable=SC2086 # flags are words by design
	run "$BIN" bench "$CFG/$dir" --model-id "$id" --random-init $flags --updates 3 \
		--python "$PYTHON" --timeout "$probe_timeout" --receipt "$receipt"
	code=$?
	[ "$dry" = 1 ] && continue
	line=$("$PYTHON" -c 'import json, sys
r = json.load(open(sys.argv[1]))
print("%s\t%s" % (r["status"], r["measured"].get("peak_reserved_gb", "-")))' "$receipt" 2>/dev/null || printf 'no-receipt\t-')
	printf '%s\t%s\t%s\n' "$name" "$code" "$line" >>"$summary"
	"$BIN" bench --to-case "$receipt" >>"$OUT/cases.jsonl" 2>>"$OUT/to-case-errors.txt"
done
[ "$dry" = 1 ] && exit 0
echo "# done in $((SECONDS - start))s" >>"$summary"
if [ "$bundle" = 1 ]; then
	tar -C "$OUT" -cf "$OUT/receipts.tar" receipts && rm -rf "$OUT/receipts"
fi
cat "$summary"

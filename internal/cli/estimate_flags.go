package cli

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/canifinetune/canifinetune/estimate"
)

// requestFlags names each field of an estimate.FieldError by the estimate
// flag that sets it, with what to try instead.
var requestFlags = map[string]struct{ flag, hint string }{
	"lora_rank":         {"--rank", "--rank 16"},
	"lora_dropout":      {"--lora-dropout", "--lora-dropout 0.05  (LoRA only)"},
	"lora_targets":      {"--targets", "--method lora --targets all-linear, or --method full without --targets"},
	"extra_trainable":   {"--extra-trainable", "--extra-trainable lm_head,embed_tokens  (LoRA only)"},
	"seq_len":           {"--seq-len", "--seq-len 2048"},
	"batch":             {"--batch", "--batch 1"},
	"seq_len × batch":   {"--seq-len × --batch", "--seq-len 2048 --batch 1"},
	"grad_accum":        {"--grad-accum", "--grad-accum 1"},
	"num_gpus":          {"the number of GPUs", "--num-gpus 8"},
	"gpu_vram_gb":       {"--gpu-vram-gb", "--gpu-vram-gb 24"},
	"available_vram_gb": {"--available-vram-gb", "--gpu rtx-4090 --available-vram-gb 21.5"},
	"cpu_offload":       {"--offload", "--strategy zero2 --offload optimizer, or --strategy zero3 --offload params+optimizer"},
	"attn":              {"--attn", "--attn sdpa"},
}

// requestUsageError turns an invalid request into a usage error (exit 2)
// that names the flag: "--seq-len must be an integer in 1..16777216, got -5".
func requestUsageError(err error) error {
	var fe *estimate.FieldError
	if !errors.As(err, &fe) {
		return usageErrorf("canifinetune estimate --help", "%v", err)
	}
	f, ok := requestFlags[fe.Field]
	if !ok {
		f.flag, f.hint = fe.Field, "canifinetune estimate --help"
	}
	switch {
	case strings.HasPrefix(fe.Want, "unset under method full"):
		f.hint = fmt.Sprintf("drop %s, or --method lora", f.flag)
	case fe.Field == "cpu_offload" && strings.HasPrefix(fe.Want, string(estimate.OffloadParamsOptimizer)+" or"):
		f.hint = "--offload " + string(estimate.OffloadParamsOptimizer)
	}
	return usageErrorf(f.hint, "%s must be %s, got %s", f.flag, fe.Want, fe.Value)
}

// checkMemoryFlags checks --gpu-vram-gb and --available-vram-gb (NaN, ±Inf,
// 0 and sizes beyond any card are refused by name) and hands them on as
// GPUVRAMGB and AvailableGB.
func (c *EstimateCmd) checkMemoryFlags() error {
	for _, f := range []struct {
		field string
		v     *float64
		to    *float64
	}{{"gpu_vram_gb", c.VRAMFlag, &c.GPUVRAMGB}, {"available_vram_gb", c.FreeFlag, &c.AvailableGB}} {
		if f.v == nil {
			continue
		}
		if _, err := estimate.GiBBytes(f.field, *f.v); err != nil {
			return requestUsageError(err)
		}
		*f.to = *f.v
	}
	return nil
}

// numberMapper decodes an int or float flag and lets its value be negative
// (--seq-len -5): the value then reaches validation, which says what range
// is accepted, instead of kong reading "-5" as a flag.
func numberMapper(kind reflect.Kind) kong.MapperFunc {
	return func(ctx *kong.DecodeContext, target reflect.Value) error {
		if t := ctx.Scan.Peek(); t.Type == kong.UntypedToken {
			if v, ok := t.Value.(string); ok && strings.HasPrefix(v, "-") {
				if _, err := strconv.ParseFloat(v, 64); err == nil {
					ctx.Scan.Pop()
					ctx.Scan.PushTyped(v, kong.FlagValueToken)
				}
			}
		}
		t, err := ctx.Scan.PopValue("number")
		if err != nil {
			return err
		}
		v := fmt.Sprint(t.Value)
		if kind == reflect.Float64 {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("expected a number, got %q", v)
			}
			target.SetFloat(n)
			return nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("expected an integer, got %q", v)
		}
		if target.OverflowInt(n) {
			return fmt.Errorf("expected an integer, got %q (out of range)", v)
		}
		target.SetInt(n)
		return nil
	}
}

// numberMappers registers numberMapper for the numeric flag types.
func numberMappers() []kong.Option {
	return []kong.Option{
		kong.TypeMapper(reflect.TypeOf(int(0)), numberMapper(reflect.Int)),
		kong.TypeMapper(reflect.TypeOf(int64(0)), numberMapper(reflect.Int64)),
		kong.TypeMapper(reflect.TypeOf(float64(0)), numberMapper(reflect.Float64)),
	}
}

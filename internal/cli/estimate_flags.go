package cli

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/internal/report"
)

// requestUsageError turns an invalid request into a usage error (exit 2)
// that names the flag: "--seq-len must be an integer in 1..16777216, got -5".
func requestUsageError(err error) error {
	p := report.DescribeRequestError(err)
	return usageErrorf(p.Hint, "%s", p.Message)
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

// features is what the run's GPUs can execute, from the GPU table: the
// budget card, and every card a --gpus list or the detection placed the run
// on; nil when no card is in the table.
func (s *gpuSetup) features() *estimate.CardFeatures {
	cards := []*gpu.Card{s.card}
	for _, d := range s.devices {
		cards = append(cards, d.Card)
	}
	var f *estimate.CardFeatures
	for _, k := range cards {
		if k == nil {
			continue
		}
		if f == nil {
			f = &estimate.CardFeatures{Name: k.Name, BF16: true, FlashAttention2: true}
		}
		if !k.BF16 && f.BF16 {
			f.BF16, f.Name = false, k.Name
		}
		if !k.FlashAttention2() && f.FlashAttention2 {
			f.FlashAttention2, f.Name = false, k.Name
		}
	}
	return f
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

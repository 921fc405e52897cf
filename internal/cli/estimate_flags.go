package cli

import (
	"fmt"
	"github.com/canifinetune/canifinetune/internal/report"
	"reflect"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"
	"github.com/canifinetune/canifinetune/estimate"
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

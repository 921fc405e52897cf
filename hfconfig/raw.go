package hfconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
)

// ErrMalformed is wrapped by every error about a field's type or value.
var ErrMalformed = errors.New("malformed config.json")

// ErrUnsupported is wrapped when the architecture is recognised but not modelled
// (encoder-only, encoder-decoder) or not recognised at all.
var ErrUnsupported = errors.New("unsupported architecture")

// raw is a decoded config object with typed, error-reporting accessors.
// prefix names the nesting ("text_config.") in error messages.
type raw struct {
	m      map[string]json.RawMessage
	prefix string
}

func parseRaw(b []byte, prefix string) (raw, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return raw{}, fmt.Errorf("%w: invalid JSON at byte %d: %v", ErrMalformed, se.Offset, err)
		case errors.As(err, &te):
			return raw{}, fmt.Errorf("%w: %stop level is %s, want an object", ErrMalformed, prefix, te.Value)
		}
		return raw{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if m == nil {
		return raw{}, fmt.Errorf("%w: %stop level is null, want an object", ErrMalformed, prefix)
	}
	return raw{m: m, prefix: prefix}, nil
}

func (r raw) has(key string) bool {
	v, ok := r.m[key]
	return ok && string(v) != "null"
}

func (r raw) errf(key string, format string, args ...any) error {
	return fmt.Errorf("%w: field %s%s: %s", ErrMalformed, r.prefix, key, fmt.Sprintf(format, args...))
}

// field decodes the value at key as a T, or returns def when the key is
// absent or null; what names T in the error ("a string").
func field[T any](r raw, key string, def T, what string) (T, error) {
	if !r.has(key) {
		return def, nil
	}
	var v T
	if err := json.Unmarshal(r.m[key], &v); err != nil {
		var zero T
		return zero, r.errf(key, "value %s is not %s", clip(r.m[key]), what)
	}
	return v, nil
}

// str returns a string field, or def when absent or null.
func (r raw) str(key, def string) (string, error) {
	return field(r, key, def, "a string")
}

// intField returns an integer field, or def when absent or null. It rejects
// fractions, negatives and values too large to be a dimension.
func (r raw) intField(key string, def int64) (int64, error) {
	if !r.has(key) {
		return def, nil
	}
	f, err := field(r, key, 0.0, "a number")
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) || f < 0 || f > 1<<40 {
		return 0, r.errf(key, "value %s is not a non-negative integer dimension", clip(r.m[key]))
	}
	return int64(f), nil
}

// first returns the first present integer among keys (configs name the same
// dimension differently: hidden_size / n_embd / d_model).
func (r raw) first(def int64, keys ...string) (int64, error) {
	for _, k := range keys {
		if r.has(k) {
			return r.intField(k, def)
		}
	}
	return def, nil
}

// need is first, but a missing or zero dimension is an error naming the keys.
func (r raw) need(keys ...string) (int64, error) {
	v, err := r.first(0, keys...)
	if err != nil {
		return 0, err
	}
	if v <= 0 {
		return 0, fmt.Errorf("%w: field %s%s: missing or zero (a required dimension)", ErrMalformed, r.prefix, strings.Join(keys, " / "))
	}
	return v, nil
}

func (r raw) boolField(key string, def bool) (bool, error) {
	return field(r, key, def, "a boolean")
}

func (r raw) floatField(key string, def float64) (float64, error) {
	return field(r, key, def, "a number")
}

func (r raw) strings(key string) ([]string, error) {
	return field[[]string](r, key, nil, "a list of strings")
}

func (r raw) ints(key string) ([]int64, error) {
	return field[[]int64](r, key, nil, "a list of integers")
}

func (r raw) object(key string) (raw, bool, error) {
	if !r.has(key) {
		return raw{}, false, nil
	}
	sub, err := parseRaw(r.m[key], r.prefix+key+".")
	if err != nil {
		return raw{}, false, r.errf(key, "value %s is not an object", clip(r.m[key]))
	}
	return sub, true, nil
}

func clip(b []byte) string {
	s := string(b)
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

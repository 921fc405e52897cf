package estimate

import (
	"reflect"
	"testing"
)

var sinkStrategy StrategySpec

// BenchmarkSpecLookup compares reading an option's row through choice()
// (lookup, what parsing needs for the aliases) with reading its name
// directly (rowOf, what the Spec methods use): an estimate reads dozens of
// rows.
func BenchmarkSpecLookup(b *testing.B) {
	s := ZeRO3
	b.Run("choice", func(b *testing.B) {
		for b.Loop() {
			sinkStrategy = lookup(Strategies, s)
		}
	})
	b.Run("rowOf", func(b *testing.B) {
		for b.Loop() {
			sinkStrategy = s.Spec()
		}
	})
}

// TestSpecFindsEveryRow: every Spec method returns the row of its value
// and the zero row for a value outside its table, as lookup does.
func TestSpecFindsEveryRow(t *testing.T) {
	for _, row := range Strategies {
		if got := row.Name.Spec(); !reflect.DeepEqual(got, row) {
			t.Errorf("%s: got row %+v", row.Name, got)
		}
	}
	for _, row := range Offloads {
		if got := row.Name.Spec(); !reflect.DeepEqual(got, row) {
			t.Errorf("%s: got row %+v", row.Name, got)
		}
	}
	for _, row := range Checkpointings {
		if got := row.Name.Spec(); !reflect.DeepEqual(got, row) {
			t.Errorf("%s: got row %+v", row.Name, got)
		}
	}
	for _, row := range Optimizers {
		if got := row.Name.Spec(); got.Name != row.Name || got.States != row.States {
			t.Errorf("%s: got row %+v", row.Name, got)
		}
	}
	if got := Strategy("zero4").Spec(); !reflect.DeepEqual(got, StrategySpec{}) {
		t.Errorf("unknown strategy: got row %+v", got)
	}
	if _, err := ParseStrategy("zero4"); err == nil || len(err.(*UnknownValueError).Valid) != len(Strategies) {
		t.Errorf("unknown strategy: error %v should list the %d strategies", err, len(Strategies))
	}
}

// TestStrategyAliases: the spellings people write for a strategy (FSDP's
// default, DeepSpeed's stage names) are read as it, and an alias's Spec is
// only reached through ParseStrategy (Normalize canonicalises).
func TestStrategyAliases(t *testing.T) {
	for alias, want := range map[string]Strategy{
		"fsdp": FSDPFullShard, "fsdp2": FSDPFullShard,
		"zero-1": ZeRO1, "zero_2": ZeRO2, "zero-3": ZeRO3, "zero_3": ZeRO3,
	} {
		got, err := ParseStrategy(alias)
		if err != nil || got != want {
			t.Errorf("ParseStrategy(%q) = %q, %v; want %q", alias, got, err, want)
		}
	}
	seen := map[string]Strategy{}
	for _, row := range Strategies {
		for _, a := range append([]string{string(row.Name)}, row.Aliases...) {
			if prev, dup := seen[a]; dup {
				t.Errorf("%q names both %s and %s", a, prev, row.Name)
			}
			seen[a] = row.Name
		}
	}
}

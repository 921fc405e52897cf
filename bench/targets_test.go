package bench

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPEFTTargets(t *testing.T) {
	for _, c := range []struct {
		in, want []string
	}{
		{nil, []string{"q_proj", "k_proj", "v_proj", "o_proj"}},
		{[]string{"attention", "mlp"}, []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}},
		{[]string{"all-linear"}, []string{"all-linear"}},
		{[]string{"query_key_value", "mlp"}, []string{"query_key_value", "gate_proj", "up_proj", "down_proj"}},
	} {
		if diff := cmp.Diff(c.want, PEFTTargets(c.in)); diff != "" {
			t.Errorf("PEFTTargets(%q) (-want +got):\n%s", c.in, diff)
		}
	}
}

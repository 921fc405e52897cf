package evidence

import (
	"testing"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// RequestFor is RequestForModel on the catalog's model: for every development
// case the two give the same request, assumptions and reason, so bench's
// estimate before a run (RequestForModel on a resolved model) is the one
// validate makes (RequestFor).
func TestRequestForModelMatchesRequestFor(t *testing.T) {
	cases := readDev(t)
	checked := 0
	for _, c := range cases {
		e, err := catalog.Lookup(c.Model)
		if err != nil {
			continue
		}
		m, err := hfconfig.Parse(e.Config)
		if err != nil {
			continue // RequestFor reports the parse error; nothing to share
		}
		want, wantAssumed, wantWhy := RequestFor(c)
		got, gotAssumed, gotWhy := RequestForModel(m, c)
		if gotWhy != wantWhy {
			t.Errorf("%s: reason %q, want %q", c.ID, gotWhy, wantWhy)
		}
		if diff := cmp.Diff(wantAssumed, gotAssumed); diff != "" {
			t.Errorf("%s: assumed (-RequestFor +RequestForModel):\n%s", c.ID, diff)
		}
		if diff := cmp.Diff(want, got, cmpopts.IgnoreUnexported(hfconfig.Model{})); diff != "" {
			t.Errorf("%s: request (-RequestFor +RequestForModel):\n%s", c.ID, diff)
		}
		checked++
	}
	if checked < 100 {
		t.Errorf("only %d development cases are in the catalog", checked)
	}
}

// RequestForModel uses the model it is given, not the case's model name: a
// bench probe of a local directory names no catalog model.
func TestRequestForModelUsesTheGivenModel(t *testing.T) {
	c := readDev(t)[0]
	e, err := catalog.Lookup(c.Model)
	if err != nil {
		t.Fatal(err)
	}
	m, err := hfconfig.Parse(e.Config)
	if err != nil {
		t.Fatal(err)
	}
	c.Model = "./somewhere/local"
	req, _, why := RequestForModel(m, c)
	if why != "" || req.Model != m {
		t.Errorf("RequestForModel on a local model: reason %q, model %p want %p", why, req.Model, m)
	}
	if _, _, why := RequestFor(c); why == "" {
		t.Error("RequestFor found a catalog model for a local path")
	}
}

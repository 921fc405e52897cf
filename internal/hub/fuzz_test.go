package hub

import (
	"errors"
	"io/fs"
	"slices"
	"testing"
)

// FuzzIndex: model.safetensors.index.json comes from the Hub or a local
// directory; no input may panic, and every shard accepted must be a path
// inside the repo, since it becomes a URL and a cache path.
func FuzzIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":123},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"metadata":{"total_size":1.6e10},"weight_map":{"a":"x.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../x.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"sub/x.safetensors"}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &Model{ID: "org/x"}
		shards, err := m.useIndex(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		if len(shards) == 0 || !slices.IsSorted(shards) || m.TotalSizeFromIndex < 0 {
			t.Fatalf("shards %q, total %d", shards, m.TotalSizeFromIndex)
		}
		for _, s := range shards {
			if !fs.ValidPath(s) {
				t.Fatalf("accepted shard %q outside the repo", s)
			}
		}
	})
}

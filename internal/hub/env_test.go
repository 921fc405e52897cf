package hub

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestNewFromEnv(t *testing.T) {
	home := t.TempDir()
	hfHome := filepath.Join(home, ".cache", "huggingface")
	must(t, os.MkdirAll(hfHome, 0o755))
	must(t, os.WriteFile(filepath.Join(hfHome, "token"), []byte("hf_fromfile\n"), 0o600))
	custom := filepath.Join(home, "elsewhere", "tok")
	must(t, os.MkdirAll(filepath.Dir(custom), 0o755))
	must(t, os.WriteFile(custom, []byte("  hf_custom  "), 0o600))

	type want struct {
		Endpoint, CacheDir, Token string
		Offline                   bool
	}
	tests := []struct {
		name string
		env  map[string]string
		want want
	}{
		{"defaults, token file in HF_HOME", map[string]string{"HOME": home},
			want{DefaultEndpoint, filepath.Join(hfHome, "hub"), "hf_fromfile", false}},
		{"XDG_CACHE_HOME", map[string]string{"HOME": home, "XDG_CACHE_HOME": filepath.Join(home, "xdg")},
			want{DefaultEndpoint, filepath.Join(home, "xdg", "huggingface", "hub"), "", false}},
		{"HF_HOME with ~", map[string]string{"HOME": home, "HF_HOME": "~/.cache/huggingface", "HF_ENDPOINT": "http://mirror.local:8080/"},
			want{"http://mirror.local:8080", filepath.Join(hfHome, "hub"), "hf_fromfile", false}},
		{"HF_HUB_CACHE and HF_TOKEN win", map[string]string{"HOME": home, "HF_HUB_CACHE": "/data/hub", "HF_TOKEN": " hf_env ", "HF_HUB_OFFLINE": "1"},
			want{DefaultEndpoint, "/data/hub", "hf_env", true}},
		{"HF_TOKEN_PATH", map[string]string{"HOME": home, "HF_TOKEN_PATH": custom, "HF_HUB_OFFLINE": "yes"},
			want{DefaultEndpoint, filepath.Join(hfHome, "hub"), "hf_custom", true}},
		{"offline false", map[string]string{"HOME": home, "HF_HUB_OFFLINE": "0", "HUGGING_FACE_HUB_TOKEN": "hf_legacy"},
			want{DefaultEndpoint, filepath.Join(hfHome, "hub"), "hf_legacy", false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewFromEnv(func(k string) string { return tt.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			got := want{c.Endpoint, c.CacheDir, string(c.Token), c.Offline}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewFromEnvRefuses(t *testing.T) {
	home := t.TempDir()
	for name, env := range map[string]map[string]string{
		"endpoint not a URL":  {"HOME": home, "HF_ENDPOINT": "huggingface.co"},
		"ftp endpoint":        {"HOME": home, "HF_ENDPOINT": "ftp://x"},
		"no home":             {},
		"token path is a dir": {"HOME": home, "HF_TOKEN_PATH": home},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := NewFromEnv(func(k string) string { return env[k] }); err == nil {
				t.Error("no error")
			}
		})
	}
}

func TestTokenFormatsRedacted(t *testing.T) {
	tok := Token("hf_abcdef")
	c := Client{Token: tok}
	for _, s := range []string{tok.String(), tok.GoString()} {
		if strings.Contains(s, "abcdef") {
			t.Errorf("token leaked: %s", s)
		}
	}
	if got := (c.redact("echo: Bearer hf_abcdef")); got != "echo: Bearer "+redacted {
		t.Errorf("redact = %q", got)
	}
}

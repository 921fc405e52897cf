package hub

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// filesOutside lists the files under root that are not under dir: what a
// hostile answer managed to write outside the cache.
func filesOutside(t *testing.T, root, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir && d.IsDir() {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHostileCommitHeader: X-Repo-Commit becomes a cache directory
// (snapshots/<commit>, .no_exist/<commit>) and is echoed by --json, so
// anything but a commit hash is refused before a byte is written.
func TestHostileCommitHeader(t *testing.T) {
	for _, commit := range []string{
		"../../../../elsewhere",
		"0123456789abcdef0123456789abcdef01234567/../../../../elsewhere",
		"/tmp/absolute",
		"main",
		strings.ToUpper(commitA),
		commitA + "0",
	} {
		t.Run(commit, func(t *testing.T) {
			f := newFakeHub(t)
			f.repos["org/two"] = twoShardRepo()
			f.commitHeader = commit
			root := t.TempDir()
			dir := filepath.Join(root, "a", "b", "cache")
			c, _ := f.client(dir)
			m, err := c.Model(context.Background(), "org/two", "main")
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "X-Repo-Commit") {
				t.Fatalf("Model = %+v, %v; want ErrMalformed naming X-Repo-Commit", m, err)
			}
			if !strings.Contains(err.Error(), strconv.Quote(commit)) {
				t.Errorf("error %q does not name the value", err)
			}
			if out := filesOutside(t, root, dir); len(out) > 0 {
				t.Errorf("written outside the cache: %q", out)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				t.Errorf("cache written from a refused answer: %v", entries)
			}
		})
	}
}

// TestHostileETag: the ETag names the blob file, so one that is a path is
// refused, for small files (ETag) and shards (X-Linked-Etag).
func TestHostileETag(t *testing.T) {
	for _, etag := range []string{
		`"../../../../elsewhere"`,
		`W/"../../../../elsewhere"`,
		`"sub/dir"`,
		`".."`,
		`"a\b"`,
	} {
		t.Run(etag, func(t *testing.T) {
			f := newFakeHub(t)
			f.repos["org/two"] = twoShardRepo()
			f.etagHeader = etag
			root := t.TempDir()
			dir := filepath.Join(root, "a", "b", "cache")
			c, _ := f.client(dir)
			_, err := c.Model(context.Background(), "org/two", "main")
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "ETag") || !strings.Contains(err.Error(), strconv.Quote(etag)) {
				t.Fatalf("err = %v; want ErrMalformed naming the ETag and its value", err)
			}
			if out := filesOutside(t, root, dir); len(out) > 0 {
				t.Errorf("written outside the cache: %q", out)
			}
		})
	}
}

// TestOddButHarmlessETag: an ETag that is no path but not a plain file name
// either (a space, a colon) still works: the blob is named by its sha256.
func TestOddButHarmlessETag(t *testing.T) {
	f := newFakeHub(t)
	f.repos["org/two"] = twoShardRepo()
	f.etagHeader = `"abc def:1"`
	c, _ := f.client(t.TempDir())
	if _, err := c.Model(context.Background(), "org/two", "main"); err != nil {
		t.Fatal(err)
	}
}

// TestShardSizeUnknown: the shard's total size is what the header's offsets
// are checked against; an answer that hides it ("bytes 0-N/*", or a whole
// body streamed without Content-Length) would let any offset through.
func TestShardSizeUnknown(t *testing.T) {
	for name, set := range map[string]func(f *fakeHub){
		"Content-Range total *": func(f *fakeHub) { f.unknownTotal = true },
		"200 without a length":  func(f *fakeHub) { f.noLength = true },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeHub(t)
			// The header claims 1 GB of data the file does not have.
			shard := makeShard(tensorSpec{"w", "F32", []uint64{4}, 4})
			f.repos["org/one"] = &fakeRepo{commit: commitA, files: map[string][]byte{
				"config.json":       testConfig,
				"model.safetensors": shard,
			}}
			set(f)
			c, _ := f.client(t.TempDir())
			_, err := c.Model(context.Background(), "org/one", "main")
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "size") {
				t.Fatalf("err = %v; want ErrMalformed saying the size is unknown", err)
			}
		})
	}
}

// TestTokenClippedInErrorMessage: the token is redacted before the Hub's
// message is clipped, and a token the server itself cut short is redacted
// too: no 8 consecutive characters of it reach the error.
func TestTokenClippedInErrorMessage(t *testing.T) {
	const prefix = "Access to model org/gated is restricted. Got: "
	for name, msg := range map[string]func(auth string) string{
		// The token's last character falls just past the 300-character clip.
		"clipped by us": func(auth string) string {
			pad := 300 - len(prefix) - len(auth) + 1
			return prefix + strings.Repeat("x", pad) + auth + " and more text after it"
		},
		"clipped by us, one more": func(auth string) string {
			pad := 300 - len(prefix) - len(auth) + 5
			return prefix + strings.Repeat("x", pad) + auth + " and more text after it"
		},
		"cut by the server": func(auth string) string { return prefix + auth[:len(auth)-1] },
		"cut at the front":  func(auth string) string { return prefix + auth[len("Bearer hf_"):] },
		"twice, once whole": func(auth string) string { return prefix + auth + " / " + auth[:len(auth)-4] + "…" },
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeHub(t)
			repo := twoShardRepo()
			repo.gated = true
			f.repos["org/gated"] = repo
			f.gatedMessage = msg
			c, _ := f.client(t.TempDir())
			const tok = "hf_wrongTokenValueThatIsLong0123456789"
			c.Token = tok
			_, err := c.Model(context.Background(), "org/gated", "main")
			if !errors.Is(err, ErrGated) {
				t.Fatalf("err = %v, want ErrGated", err)
			}
			text := err.Error()
			for i := 0; i+8 <= len(tok); i++ {
				if strings.Contains(text, tok[i:i+8]) {
					t.Fatalf("error shows %q of the token: %s", tok[i:i+8], text)
				}
			}
			if !strings.Contains(text, redacted) {
				t.Errorf("nothing redacted in %s", text)
			}
		})
	}
}

// TestErrorMessageControlCharacters: a Hub message cannot drive the
// terminal: escape sequences and other control characters are shown
// escaped, not sent raw.
func TestErrorMessageControlCharacters(t *testing.T) {
	f := newFakeHub(t)
	repo := twoShardRepo()
	repo.gated = true
	f.repos["org/gated"] = repo
	f.gatedMessage = func(string) string {
		return "gated \x1b]0;pwned\x07\x1b[2J\x1b[31mred\u009b31m \u202eevil\x00 end"
	}
	c, _ := f.client(t.TempDir())
	_, err := c.Model(context.Background(), "org/gated", "main")
	if !errors.Is(err, ErrGated) {
		t.Fatalf("err = %v, want ErrGated", err)
	}
	text := err.Error()
	for _, r := range text {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' {
			t.Fatalf("error holds control character %U: %q", r, text)
		}
	}
	if !strings.Contains(text, `\x1b[2J`) || !strings.Contains(text, "end") {
		t.Errorf("the message was not kept, escaped: %q", text)
	}
}

// TestStaleTempFilesSwept: a run killed with SIGKILL leaves its temporary
// files; the next online run removes those older than staleTempAge, and
// leaves recent ones (another run may be writing them) and anything that
// is not ours alone.
func TestStaleTempFilesSwept(t *testing.T) {
	f := newFakeHub(t)
	f.repos["org/two"] = twoShardRepo()
	dir := t.TempDir()
	c, _ := f.client(dir)
	if _, err := c.Model(context.Background(), "org/two", "main"); err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(dir, "models--org--two")
	snap := filepath.Join(repoDir, "snapshots", commitA)
	old := time.Now().Add(-2 * staleTempAge)
	plant := func(p string, mtime time.Time, isDir bool) string {
		t.Helper()
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if isDir {
			must(t, os.Mkdir(p, 0o755))
		} else {
			must(t, os.WriteFile(p, []byte("partial"), 0o644))
		}
		must(t, os.Chtimes(p, mtime, mtime))
		return p
	}
	stale := []string{
		plant(filepath.Join(snap, ".config.json.tmp-123456"), old, false),
		plant(filepath.Join(repoDir, "blobs", ".abc.tmp-99"), old, false),
		plant(filepath.Join(snap, ".canifinetune", "headers", ".x.safetensors.json.tmp-1"), old, false),
		plant(filepath.Join(repoDir, "refs", ".main.tmp-7"), old, false),
		plant(filepath.Join(snap, ".model.safetensors.index.json.tmp-link-42"), old, false),
	}
	kept := []string{
		plant(filepath.Join(snap, ".fresh.json.tmp-5"), time.Now(), false),   // a run writing now
		plant(filepath.Join(repoDir, "blobs", "abc.incomplete"), old, false), // huggingface_hub's
		plant(filepath.Join(snap, "notes.tmp-old"), old, false),              // not our pattern
		plant(filepath.Join(snap, ".dir.tmp-3"), old, true),                  // a directory
	}
	if _, err := c.Model(context.Background(), "org/two", "main"); err != nil {
		t.Fatal(err)
	}
	for _, p := range stale {
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("stale %s not removed (%v)", p, err)
		}
	}
	for _, p := range kept {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
}

// TestTokenFileBounded: the token file is small and regular; a device, a
// directory or a huge file is refused with its path, never read whole.
func TestTokenFileBounded(t *testing.T) {
	home := t.TempDir()
	big := filepath.Join(home, "big")
	must(t, os.WriteFile(big, []byte(strings.Repeat("x", maxTokenFile+1)), 0o600))
	for name, path := range map[string]string{
		"/dev/zero":   "/dev/zero",
		"a directory": home,
		"huge file":   big,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(path); err != nil {
				t.Skip(err)
			}
			_, err := NewFromEnv(func(k string) string {
				return map[string]string{"HOME": home, "HF_TOKEN_PATH": path}[k]
			})
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "HF_TOKEN_PATH") {
				t.Errorf("err = %v; want an error naming %s and HF_TOKEN_PATH", err, path)
			}
		})
	}
}

// TestLocalIndexErrorsAreLocal: a local directory's broken index is named
// as the local file it is, not as a Hub response.
func TestLocalIndexErrorsAreLocal(t *testing.T) {
	dir := writeDir(t, map[string][]byte{"config.json": testConfig, "model.safetensors.index.json": []byte(`{"weight_map":{}}`)})
	_, err := LocalModel(dir)
	if err == nil {
		t.Fatal("no error")
	}
	var he *Error
	if errors.As(err, &he) || strings.Contains(err.Error(), "hub") || strings.Contains(err.Error(), "response") ||
		!strings.Contains(err.Error(), filepath.Join(dir, "model.safetensors.index.json")) {
		t.Errorf("err = %v; want a local error naming the index's path", err)
	}
}

// TestLocalMissingShard: a shard the index names but the directory lacks is
// an incomplete checkpoint, not a path the user mistyped, so its error does
// not read as "no such file" (which the CLI treats as a usage error).
func TestLocalMissingShard(t *testing.T) {
	files := twoShardRepo().files
	dir := writeDir(t, map[string][]byte{"config.json": testConfig, "model.safetensors.index.json": files["model.safetensors.index.json"],
		"model-00001-of-00002.safetensors": files["model-00001-of-00002.safetensors"]})
	_, err := LocalModel(dir)
	if err == nil || errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") {
		t.Errorf("err = %v; want an error naming the missing shard that is not fs.ErrNotExist", err)
	}
}

// TestShardNameControlCharacters: shard names are printed (progress lines,
// errors) and become paths, so the index may not name one with control
// characters.
func TestShardNameControlCharacters(t *testing.T) {
	dir := writeDir(t, map[string][]byte{"config.json": testConfig,
		"model.safetensors.index.json": []byte(`{"weight_map":{"w":"\u001b[2Jx.safetensors"}}`)})
	_, err := LocalModel(dir)
	if err == nil || strings.ContainsRune(err.Error(), 0x1b) {
		t.Errorf("err = %q; want a refusal with the name escaped", err)
	}
}

// TestCacheRefusesNonCommit: whatever a caller passes, the cache never
// joins a commit that is not a hash into a path, to read or to write.
func TestCacheRefusesNonCommit(t *testing.T) {
	root := t.TempDir()
	cc := cache{root: filepath.Join(root, "a", "b", "cache")}
	const bad = "../../../../elsewhere"
	for name, err := range map[string]error{
		"writeRef":    cc.writeRef("org/x", "main", bad),
		"writeAbsent": cc.writeAbsent("org/x", bad, "model.safetensors"),
		"writeFile":   cc.writeFile("org/x", bad, "config.json", `"abc"`, testConfig),
		"writeHeader": cc.writeHeader("org/x", bad, "model.safetensors", []byte(`{}`), 2, 10),
	} {
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("%s: err = %v, want a refusal naming the commit", name, err)
		}
	}
	if out := filesOutside(t, root, cc.root); len(out) > 0 {
		t.Errorf("written outside the cache: %q", out)
	}
	must(t, os.MkdirAll(filepath.Join(root, "a", "elsewhere"), 0o755)) // where the commit leads
	must(t, os.WriteFile(filepath.Join(root, "a", "elsewhere", "config.json"), testConfig, 0o644))
	if _, ok := cc.read("org/x", bad, "config.json"); ok {
		t.Error("read followed the commit out of the cache")
	}
}

// TestFirstShardFailureReported: when one shard's answer is refused, the
// reads of the others are cancelled, and the refusal is what the caller
// sees, not "hub unavailable: context canceled" from a cancelled read.
func TestFirstShardFailureReported(t *testing.T) {
	for range 20 {
		f := newFakeHub(t)
		f.repos["org/two"] = twoShardRepo()
		f.unknownTotal = true
		c, _ := f.client("")
		_, err := c.Model(context.Background(), "org/two", "main")
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("err = %v; want the refusal (ErrMalformed)", err)
		}
	}
}

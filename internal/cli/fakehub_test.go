package cli

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/hfconfig"
)

// fakeTensor is one tensor of a generated safetensors file, stored as BF16.
type fakeTensor struct {
	name  string
	shape []uint64
}

func (t fakeTensor) elements() uint64 {
	n := uint64(1)
	for _, d := range t.shape {
		n *= d
	}
	return n
}

// fakeShard is a safetensors file whose data section is all zeros and never
// allocated: a 1 GB shard costs its header, so a fake repo can have the
// real sizes of a catalog model.
type fakeShard struct {
	head []byte // the 8-byte length and the JSON header
	size int64  // the whole file
}

// newFakeShard lays the tensors out back to back as BF16.
func newFakeShard(tensors []fakeTensor) (fakeShard, uint64, error) {
	entries := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off uint64
	for _, t := range tensors {
		n := 2 * t.elements()
		entries[t.name] = map[string]any{"dtype": "BF16", "shape": t.shape, "data_offsets": []uint64{off, off + n}}
		off += n
	}
	hdr, err := json.Marshal(entries)
	if err != nil {
		return fakeShard{}, 0, err
	}
	for len(hdr)%8 != 0 { // safetensors pads its header to 8 bytes
		hdr = append(hdr, ' ')
	}
	head := binary.LittleEndian.AppendUint64(nil, uint64(len(hdr)))
	head = append(head, hdr...)
	return fakeShard{head: head, size: int64(len(head)) + int64(off)}, off, nil
}

// reader serves the shard's bytes: the header, then zeros.
func (s fakeShard) reader() io.ReadSeeker { return &zeroTail{head: s.head, size: s.size} }

// zeroTail is an io.ReadSeeker over head followed by zeros up to size.
type zeroTail struct {
	head []byte
	size int64
	off  int64
}

func (z *zeroTail) Read(p []byte) (int, error) {
	if z.off >= z.size {
		return 0, io.EOF
	}
	n := int64(len(p))
	if rest := z.size - z.off; n > rest {
		n = rest
	}
	for i := int64(0); i < n; i++ {
		if pos := z.off + i; pos < int64(len(z.head)) {
			p[i] = z.head[pos]
		} else {
			p[i] = 0
		}
	}
	z.off += n
	return int(n), nil
}

func (z *zeroTail) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += z.off
	case io.SeekEnd:
		offset += z.size
	default:
		return 0, errors.New("zeroTail: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("zeroTail: negative position")
	}
	z.off = offset
	return offset, nil
}

// tensorsFor lists tensors whose element counts add up to exactly what
// config.json implies, one per module, so a fake checkpoint's exact count
// equals the config-derived one unless a test adds to it.
func tensorsFor(m *hfconfig.Model) []fakeTensor {
	var ts []fakeTensor
	flat := func(name string, n int64) {
		if n > 0 {
			ts = append(ts, fakeTensor{name, []uint64{uint64(n)}})
		}
	}
	flat("model.embed_tokens.weight", m.EmbeddingParams)
	flat("model.embed_positions.weight", m.PositionParams)
	for i, l := range m.Layers {
		for _, lin := range l.Linears {
			base := fmt.Sprintf("model.layers.%d.%s", i, lin.Name)
			shape := []uint64{uint64(lin.Out), uint64(lin.In)}
			if lin.Copies > 1 {
				shape = append([]uint64{uint64(lin.Copies)}, shape...)
			}
			ts = append(ts, fakeTensor{base + ".weight", shape})
			if lin.Bias {
				flat(base+".bias", lin.Out*max(lin.Copies, 1))
			}
		}
		flat(fmt.Sprintf("model.layers.%d.norms.weight", i), l.NormParams)
	}
	flat("model.norm.weight", m.FinalNormParams)
	flat("lm_head.weight", m.LMHeadParams)
	flat("model.vision_tower.weight", m.FrozenTowerParams)
	return ts
}

// fakeRepo is one repo of the fake Hub.
type fakeRepo struct {
	commit string
	files  map[string][]byte
	shards map[string]fakeShard
	// gated repos answer 403 GatedRepo to any request without fakeGoodToken.
	gated bool
	// status, when set, is the answer to every request (429, 500…), with
	// message as the Hub's explanation when set.
	status  int
	message string

	// Hostile answers, as a compromised mirror could give them.
	//
	// commitHeader, when set, is sent as X-Repo-Commit.
	commitHeader string
	// etag, when set, is sent as every file's ETag.
	etag string
	// unknownTotal answers shard Range requests with "bytes a-b/*".
	unknownTotal bool
	// echo, when set, makes the repo gated and writes its error message
	// from the request's Authorization header.
	echo func(auth string) string
}

// fakeGoodToken is the only token the fake Hub accepts for a gated repo.
const fakeGoodToken = "hf_fakeGoodTokenValue0123456789"

// fakeModel builds a repo from config.json with a two-shard index (one
// shard when the model has a single tensor), adding extra tensors that the
// config does not describe; totalSizeDelta is added to the index's
// metadata.total_size to make it disagree with the headers.
func fakeModel(commit string, config []byte, extra []fakeTensor, totalSizeDelta int64) (*fakeRepo, error) {
	m, err := hfconfig.Parse(config)
	if err != nil {
		return nil, err
	}
	ts := append(tensorsFor(m), extra...)
	half := (len(ts) + 1) / 2
	parts := [][]fakeTensor{ts[:half], ts[half:]}
	r := &fakeRepo{commit: commit, files: map[string][]byte{"config.json": config}, shards: map[string]fakeShard{}}
	weightMap := map[string]string{}
	var total uint64
	for i, part := range parts {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(parts))
		sh, n, err := newFakeShard(part)
		if err != nil {
			return nil, err
		}
		r.shards[name] = sh
		total += n
		for _, t := range part {
			weightMap[t.name] = name
		}
	}
	idx, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": int64(total) + totalSizeDelta}, "weight_map": weightMap})
	if err != nil {
		return nil, err
	}
	r.files["model.safetensors.index.json"] = idx
	return r, nil
}

// tinyConfig is a Llama-layout model in no catalog: what a user's own
// upload looks like.
const tinyConfig = `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,"num_hidden_layers":2,` +
	`"num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":128,"vocab_size":1000,"tie_word_embeddings":false,"torch_dtype":"bfloat16"}`

// fakeCommit is a 40-hex commit for repo number i.
func fakeCommit(i int) string { return strings.Repeat(strconv.Itoa(i%10), 40) }

// newFakeHub serves, the way huggingface.co does (X-Repo-Commit, ETag,
// X-Error-Code, Range requests):
//
//	acme/tiny-llama      a model in no catalog: config.json + 2 shards
//	acme/tiny-extra      the same config, shards with a vision tower the
//	                     config does not describe, and a wrong total_size
//	acme/gated           gated: 403 GatedRepo without fakeGoodToken
//	acme/busy            429 with Retry-After: 3600
//	Qwen/Qwen2.5-0.5B    the catalog's config with full-size (sparse) shards
//
// and hostile answers, as a compromised mirror could give them:
//
//	acme/evil-commit     X-Repo-Commit: ../../../../outside
//	acme/evil-etag       ETag: "../../../../outside"
//	acme/no-total        shards served as "Content-Range: bytes a-b/*"
//	acme/echo-clipped    gated, echoing the token across the 300th character
//	acme/echo-cut        gated, echoing the token cut short by the server
//	acme/escapes         400 whose message holds terminal escape sequences
//
// and 401 RepoNotFound (404 with a token) for anything else.
func newFakeHub() (*httptest.Server, error) {
	repos := map[string]*fakeRepo{}
	var err error
	if repos["acme/tiny-llama"], err = fakeModel(fakeCommit(1), []byte(tinyConfig), nil, 0); err != nil {
		return nil, err
	}
	if repos["acme/tiny-extra"], err = fakeModel(fakeCommit(2), []byte(tinyConfig), []fakeTensor{{"vision_tower.patch_embed.weight", []uint64{1000, 64}}}, 4096); err != nil {
		return nil, err
	}
	if repos["acme/gated"], err = fakeModel(fakeCommit(3), []byte(tinyConfig), nil, 0); err != nil {
		return nil, err
	}
	repos["acme/gated"].gated = true
	repos["acme/busy"] = &fakeRepo{commit: fakeCommit(4), status: http.StatusTooManyRequests}
	hostile := func(name string, set func(r *fakeRepo)) error {
		r, err := fakeModel(fakeCommit(6), []byte(tinyConfig), nil, 0)
		if err != nil {
			return err
		}
		set(r)
		repos[name] = r
		return nil
	}
	for name, set := range map[string]func(r *fakeRepo){
		"acme/evil-commit": func(r *fakeRepo) { r.commitHeader = "../../../../outside" },
		"acme/evil-etag":   func(r *fakeRepo) { r.etag = `"../../../../outside"` },
		"acme/no-total":    func(r *fakeRepo) { r.unknownTotal = true },
		// The token clipped at the 300th character of the message: all but
		// its last character would be shown if it were redacted after the
		// clip.
		"acme/echo-clipped": func(r *fakeRepo) {
			r.echo = func(auth string) string {
				head := "Access to model acme/echo-clipped is restricted. Got: "
				return head + strings.Repeat("x", 300-len(head)-len(auth)+1) + auth + " (end)"
			}
		},
		// A server that cuts the echoed token short itself.
		"acme/echo-cut": func(r *fakeRepo) {
			r.echo = func(auth string) string {
				return "Access to model acme/echo-cut is restricted. Got: " + auth[:max(len(auth)-2, 0)]
			}
		},
		"acme/escapes": func(r *fakeRepo) {
			r.status = http.StatusBadRequest
			r.message = "bad request \x1b]0;pwned\x07\x1b[2J\x1b[31mred\u202eevil"
		},
	} {
		if err := hostile(name, set); err != nil {
			return nil, err
		}
	}
	qwen, err := catalog.Lookup("Qwen/Qwen2.5-0.5B")
	if err != nil {
		return nil, err
	}
	if repos["Qwen/Qwen2.5-0.5B"], err = fakeModel(fakeCommit(5), qwen.Config, nil, 0); err != nil {
		return nil, err
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { serveFakeHub(repos, w, r) })), nil
}

func serveFakeHub(repos map[string]*fakeRepo, w http.ResponseWriter, r *http.Request) {
	// /{org}/{name}/resolve/{revision}/{file}
	parts := strings.SplitN(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/", 5)
	if len(parts) < 5 || parts[2] != "resolve" {
		http.Error(w, "bad path", http.StatusBadRequest)
		return
	}
	id := parts[0] + "/" + parts[1]
	rev, _ := url.PathUnescape(parts[3])
	file, _ := url.PathUnescape(parts[4])
	auth := r.Header.Get("Authorization")
	fail := func(status int, code, msg string) {
		if code != "" {
			w.Header().Set("X-Error-Code", code)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
	repo, ok := repos[id]
	switch {
	case !ok && auth == "":
		// The Hub answers 401, not 404, to an anonymous request for a repo
		// that does not exist, since it might be private.
		fail(http.StatusUnauthorized, "RepoNotFound", "Repository Not Found for url: "+r.URL.String()+".")
		return
	case !ok:
		fail(http.StatusNotFound, "RepoNotFound", "Repository Not Found")
		return
	case repo.echo != nil && auth != "Bearer "+fakeGoodToken:
		fail(http.StatusForbidden, "GatedRepo", repo.echo(auth))
		return
	case repo.gated && auth != "Bearer "+fakeGoodToken:
		// Echo the Authorization header, as a careless proxy might, so a
		// test can check that the token is redacted from what is printed.
		fail(http.StatusForbidden, "GatedRepo", "Access to model "+id+" is restricted and you are not in the authorized list. Got: "+auth)
		return
	case repo.status != 0:
		w.Header().Set("Retry-After", "3600")
		fail(repo.status, "", cmp.Or(repo.message, http.StatusText(repo.status)))
		return
	case rev != "main" && rev != repo.commit && (repo.commitHeader == "" || rev != repo.commitHeader):
		fail(http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	w.Header().Set("X-Repo-Commit", cmp.Or(repo.commitHeader, repo.commit))
	if sh, ok := repo.shards[file]; ok {
		w.Header().Set("ETag", cmp.Or(repo.etag, fmt.Sprintf(`"%x-%d"`, sh.head[:8], sh.size)))
		if repo.unknownTotal {
			serveUnknownTotal(w, r, sh)
			return
		}
		http.ServeContent(w, r, "", time.Time{}, sh.reader())
		return
	}
	body, ok := repo.files[file]
	if !ok {
		fail(http.StatusNotFound, "EntryNotFound", file+" does not exist on \""+rev+"\"")
		return
	}
	w.Header().Set("ETag", cmp.Or(repo.etag, fmt.Sprintf(`"%x"`, len(body))))
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// serveUnknownTotal answers a Range request for a shard with
// "Content-Range: bytes first-last/*": the range, but not the file's size.
func serveUnknownTotal(w http.ResponseWriter, r *http.Request, sh fakeShard) {
	spec, _ := strings.CutPrefix(r.Header.Get("Range"), "bytes=")
	a, b, _ := strings.Cut(spec, "-")
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || first > last || first >= sh.size {
		http.Error(w, "want a Range", http.StatusBadRequest)
		return
	}
	last = min(last, sh.size-1)
	w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/*", first, last))
	w.WriteHeader(http.StatusPartialContent)
	rd := sh.reader()
	rd.Seek(first, io.SeekStart)
	io.CopyN(w, rd, last-first+1)
}

// writeSafetensors writes a real (small) safetensors file of BF16 tensors,
// each spec "name:d1xd2…", for local-checkpoint scripts.
func writeSafetensors(path string, specs []string) error {
	var ts []fakeTensor
	for _, s := range specs {
		name, dims, ok := strings.Cut(s, ":")
		if !ok {
			return fmt.Errorf("tensor %q: want name:d1xd2", s)
		}
		var shape []uint64
		for _, d := range strings.Split(dims, "x") {
			n, err := strconv.ParseUint(d, 10, 32)
			if err != nil {
				return fmt.Errorf("tensor %q: dimension %q: %w", s, d, err)
			}
			shape = append(shape, n)
		}
		ts = append(ts, fakeTensor{name, shape})
	}
	sh, _, err := newFakeShard(ts)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := f.Write(sh.head); err != nil {
		f.Close()
		return err
	}
	// A sparse tail: the weights are never read, only their extent matters.
	return errors.Join(f.Truncate(sh.size), f.Close())
}

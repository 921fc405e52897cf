package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/canifinetune/canifinetune/internal/localfile"
	"github.com/canifinetune/canifinetune/internal/safetensors"
)

// Weight files, as transformers names them.
const (
	configFile = "config.json"
	indexFile  = "model.safetensors.index.json"
	singleFile = "model.safetensors"
)

// noWeightsWarning is the warning of a repo that has neither weight file,
// online or from the cache's .no_exist records.
const noWeightsWarning = "no safetensors weights in the repo (" + indexFile + " or " + singleFile + "): counts come from config.json"

// speculativeRange is the first range read from each shard: enough for the
// header of nearly every shard (a few hundred tensors at ~100 bytes each), so
// one request usually does; a larger header costs one more.
const speculativeRange = 128 << 10

// Model is what canifinetune needs to know about a checkpoint.
type Model struct {
	// ID is the Hub id ("org/name") or, for LocalModel, the directory.
	ID string `json:"id"`
	// Revision is the branch, tag or commit asked for ("main" by default);
	// empty for a local directory.
	Revision string `json:"revision,omitempty"`
	// Commit is the commit the revision resolved to; empty when the Hub did
	// not say (a mirror without X-Repo-Commit) and for a local directory.
	Commit string `json:"commit,omitempty"`
	// ConfigJSON is config.json, verbatim, for package hfconfig.
	ConfigJSON []byte `json:"-"`
	// Tensors are the exact counts from the shard headers; nil when the
	// checkpoint has no safetensors weights (or, offline, when the cache
	// holds none of them: see Warnings).
	Tensors *safetensors.Counts `json:"tensors,omitempty"`
	// TotalSizeFromIndex is the index's metadata.total_size, 0 if absent.
	TotalSizeFromIndex int64 `json:"total_size_from_index,omitempty"`
	// Shards are the safetensors files, sorted; Headers[i] is Shards[i]'s.
	Shards  []string             `json:"shards,omitempty"`
	Headers []safetensors.Header `json:"-"`
	// FromCache is true when nothing was fetched: every file came from the
	// huggingface_hub cache.
	FromCache bool `json:"from_cache"`
	// Warnings are problems that did not stop the answer: total_size
	// disagreeing with the headers, a cache that could not be written, no
	// safetensors weights.
	Warnings []string `json:"warnings,omitempty"`
}

// Model reads config.json and the safetensors headers of repo id at
// revision ("" means "main"), from the cache when it has them and from the
// Hub otherwise (never, when c.Offline). Only headers are read: a Range
// request per shard, never the weights.
func (c *Client) Model(ctx context.Context, id, revision string) (*Model, error) {
	if revision == "" {
		revision = "main"
	}
	if err := validateID(id, revision); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.deadline())
	defer cancel()
	cc := cache{root: c.CacheDir}
	m := &Model{ID: id, Revision: revision}

	if c.Offline {
		commit, ok := cc.resolve(id, revision)
		if !ok {
			return nil, offlineError(id, revision, "", "the revision is not in the cache")
		}
		return m, c.fillFromCache(m, cc, commit)
	}
	// A commit hash names content that never changes: a complete cached
	// snapshot needs no request at all.
	if commit, ok := cc.resolve(id, revision); ok && isCommit(revision) {
		mm := &Model{ID: id, Revision: revision}
		if err := c.fillFromCache(mm, cc, commit); err == nil && len(mm.Warnings) == 0 {
			return mm, nil
		}
	}

	cfg, err := c.get(ctx, id, revision, configFile, nil)
	if errors.Is(err, ErrUnavailable) {
		// As huggingface_hub does when the Hub cannot be reached: answer from
		// the cache if it has the revision, and say so.
		if commit, ok := cc.resolve(id, revision); ok {
			mm := &Model{ID: id, Revision: revision}
			if cerr := c.fillFromCache(mm, cc, commit); cerr == nil {
				mm.warn("the Hub could not be reached (" + err.Error() + "); answered from the cache")
				return mm, nil
			}
		}
	}
	if err != nil {
		return nil, err
	}
	m.Commit = cfg.commit
	if m.Commit == "" && isCommit(revision) {
		m.Commit = revision
	}
	m.ConfigJSON = cfg.body
	if m.Commit == "" {
		m.warn("the Hub did not name the commit (no X-Repo-Commit); nothing is cached")
	}
	// The Hub answered, so this run writes the cache: first remove what
	// runs killed mid-write left there.
	cc.sweepStale(id, time.Now())
	m.warnErr(cc.writeRef(id, revision, m.Commit))
	m.warnErr(cc.writeFile(id, m.Commit, configFile, cfg.etag, cfg.body))

	// From here on, ask for the commit, so every file comes from one snapshot
	// even if the branch moves meanwhile.
	ref := firstNonEmpty(m.Commit, revision)
	shards, single, err := c.shardList(ctx, m, cc, ref)
	if err != nil {
		return nil, err
	}
	if single != nil {
		if err := m.finish(shards, []safetensors.Header{*single}); err != nil {
			return nil, err
		}
		return m, nil
	}
	if len(shards) == 0 {
		return m, nil
	}
	// The first failure stops the other reads: the answer needs every shard.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	headers := make([]safetensors.Header, len(shards))
	errs := make([]error, len(shards))
	cacheErrs := make([]error, len(shards))
	var (
		mu   sync.Mutex
		done int
		wg   sync.WaitGroup
		sem  = make(chan struct{}, c.concurrency())
	)
	for i, shard := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			headers[i], cacheErrs[i], errs[i] = c.shardHeader(ctx, m, cc, ref, shard)
			if errs[i] != nil {
				stop()
				return
			}
			mu.Lock()
			defer mu.Unlock()
			done++
			if c.Progress != nil && len(shards) > 1 {
				fmt.Fprintf(c.Progress, "reading safetensors headers of %s: %d/%d (%s)\n", id, done, len(shards), shard)
			}
		}()
	}
	wg.Wait()
	// Report the first real failure, not the cancellations it caused.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, err := range cacheErrs {
		m.warnErr(err)
	}
	if err := m.finish(shards, headers); err != nil {
		return nil, err
	}
	return m, nil
}

// shardList finds the safetensors files: the index's weight_map, else the
// single model.safetensors (whose header, read to learn whether it exists,
// comes back as single), else none (a warning, not an error: the estimate can
// still use config.json).
func (c *Client) shardList(ctx context.Context, m *Model, cc cache, ref string) (shards []string, single *safetensors.Header, err error) {
	idx, ok := cc.read(m.ID, m.Commit, indexFile)
	if !ok && !cc.absent(m.ID, m.Commit, indexFile) {
		f, err := c.get(ctx, m.ID, ref, indexFile, nil)
		switch {
		case err == nil:
			idx = f.body
			ok = true
			m.warnErr(cc.writeFile(m.ID, m.Commit, indexFile, f.etag, f.body))
		case isEntryNotFound(err):
			m.warnErr(cc.writeAbsent(m.ID, m.Commit, indexFile))
		default:
			return nil, nil, err
		}
	}
	if ok {
		shards, err := m.useIndex(idx)
		return shards, nil, err
	}
	if cc.absent(m.ID, m.Commit, singleFile) {
		m.warn(noWeightsWarning)
		return nil, nil, nil
	}
	h, _, cached, err := cc.readHeader(m.ID, m.Commit, singleFile)
	if err != nil {
		return nil, nil, err
	}
	if !cached {
		var cacheErr error
		h, cacheErr, err = c.fetchHeader(ctx, m, cc, ref, singleFile)
		m.warnErr(cacheErr)
		if isEntryNotFound(err) {
			m.warnErr(cc.writeAbsent(m.ID, m.Commit, singleFile))
			m.warn(noWeightsWarning)
			return nil, nil, nil
		}
		if err != nil {
			return nil, nil, err
		}
	}
	return []string{singleFile}, &h, nil
}

// isEntryNotFound tells a missing file (try the next candidate) from a
// missing repo or revision (stop).
func isEntryNotFound(err error) bool {
	var he *Error
	if !errors.As(err, &he) || he.Kind != ErrNotFound {
		return false
	}
	return he.Code != "RepoNotFound" && he.Code != "RevisionNotFound"
}

// shardHeader returns a shard's header from the cache, or fetches it.
func (c *Client) shardHeader(ctx context.Context, m *Model, cc cache, ref, shard string) (h safetensors.Header, cacheErr, err error) {
	h, _, ok, err := cc.readHeader(m.ID, m.Commit, shard)
	if err != nil || ok {
		return h, nil, err
	}
	return c.fetchHeader(ctx, m, cc, ref, shard)
}

// fetchHeader reads a shard's header with at most two Range requests and
// caches it; cacheErr reports a failure to write the cache.
func (c *Client) fetchHeader(ctx context.Context, m *Model, cc cache, ref, shard string) (h safetensors.Header, cacheErr, err error) {
	fail := func(err error) (safetensors.Header, error, error) {
		return safetensors.Header{}, nil, &Error{Kind: ErrMalformed, Repo: m.ID, Revision: m.Revision, File: shard, Err: err}
	}
	first, err := c.get(ctx, m.ID, ref, shard, &byteRange{0, speculativeRange - 1})
	if err != nil {
		return safetensors.Header{}, nil, err
	}
	// The file's size is what every offset in the header is checked
	// against: an answer that hides it ("Content-Range: bytes 0-N/*", a
	// whole body streamed without Content-Length) would let a header claim
	// any amount of data, so it is refused rather than trusted.
	if first.size < 0 {
		return fail(errors.New("the answer does not give the file's total size (Content-Range \"bytes first-last/*\" or no Content-Length), so the header cannot be checked against it"))
	}
	n, err := safetensors.HeaderLength(first.body)
	if err != nil {
		return fail(err)
	}
	need := int64(safetensors.PrefixLength + n)
	if need > first.size {
		return fail(fmt.Errorf("%w: header of %d bytes does not fit in a file of %d bytes", safetensors.ErrTruncated, n, first.size))
	}
	buf := first.body
	if int64(len(buf)) < need {
		rest, err := c.get(ctx, m.ID, ref, shard, &byteRange{int64(len(buf)), need - 1})
		if err != nil {
			return safetensors.Header{}, nil, err
		}
		if rest.size != first.size {
			return fail(fmt.Errorf("the file's size changed between two requests (%d, then %d bytes)", first.size, rest.size))
		}
		buf = append(buf, rest.body...)
	}
	h, err = safetensors.ParseHeader(buf)
	if err != nil {
		return fail(err)
	}
	if err := h.CheckFileSize(uint64(first.size)); err != nil {
		return fail(err)
	}
	// A cache that cannot be written costs the next run a request, not this
	// answer: the caller turns it into a warning.
	return h, cc.writeHeader(m.ID, m.Commit, shard, buf[safetensors.PrefixLength:need], n, first.size), nil
}

// fillFromCache answers from the cache alone. config.json is required; a
// missing safetensors header is ErrOffline, naming the shard.
func (c *Client) fillFromCache(m *Model, cc cache, commit string) error {
	m.Commit = commit
	m.FromCache = true
	cfg, ok := cc.read(m.ID, commit, configFile)
	if !ok {
		return offlineError(m.ID, m.Revision, configFile, "")
	}
	m.ConfigJSON = cfg
	var shards []string
	if idx, ok := cc.read(m.ID, commit, indexFile); ok {
		s, err := m.useIndex(idx)
		if err != nil {
			return err
		}
		shards = s
	} else if h, _, ok, err := cc.readHeader(m.ID, commit, singleFile); err != nil {
		return err
	} else if ok {
		return m.finish([]string{singleFile}, []safetensors.Header{h})
	} else if cc.absent(m.ID, commit, indexFile) && cc.absent(m.ID, commit, singleFile) {
		m.warn(noWeightsWarning)
		return nil
	} else {
		m.warn("safetensors headers are not in the cache: counts come from config.json; run once online for exact counts")
		return nil
	}
	headers := make([]safetensors.Header, len(shards))
	for i, shard := range shards {
		h, _, ok, err := cc.readHeader(m.ID, commit, shard)
		if err != nil {
			return err
		}
		if !ok {
			return offlineError(m.ID, m.Revision, shard, "its safetensors header is not in the cache")
		}
		headers[i] = h
	}
	return m.finish(shards, headers)
}

func offlineError(repo, rev, file, why string) error {
	e := &Error{Kind: ErrOffline, Repo: repo, Revision: rev, File: file,
		Hint: "not in the cache; run once online or unset HF_HUB_OFFLINE (and drop --offline)"}
	if why != "" {
		e.Message = why
	}
	return e
}

// index is model.safetensors.index.json.
type index struct {
	Metadata struct {
		TotalSize json.Number `json:"total_size"`
	} `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// useIndex reads an index the Hub or the cache gave into m and returns its
// shards, sorted and unique; a bad one is ErrMalformed.
func (m *Model) useIndex(b []byte) ([]string, error) {
	shards, total, err := parseIndex(b)
	if err != nil {
		return nil, &Error{Kind: ErrMalformed, Repo: m.ID, Revision: m.Revision, File: indexFile, Err: err}
	}
	m.TotalSizeFromIndex = total
	return shards, nil
}

// parseIndex reads model.safetensors.index.json: its shards, sorted and
// unique, and metadata.total_size (0 if absent). Its errors name the field,
// not the file: the caller says whether that is a Hub answer or a local path.
func parseIndex(b []byte) (shards []string, totalSize int64, err error) {
	var idx index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, 0, err
	}
	if len(idx.WeightMap) == 0 {
		return nil, 0, errors.New("no weight_map")
	}
	if s := idx.Metadata.TotalSize; s != "" {
		// Some writers store total_size as a float ("1.6e10").
		if v, err := s.Int64(); err == nil && v >= 0 {
			totalSize = v
		} else if f, err := s.Float64(); err == nil && f >= 0 && f < math.MaxInt64 && f == math.Trunc(f) {
			totalSize = int64(f)
		} else {
			return nil, 0, fmt.Errorf("metadata.total_size %q is not a byte count", s)
		}
	}
	for tensor, shard := range idx.WeightMap {
		// Shard names become URL and cache paths: refuse any that could
		// leave the repo ("../x", "/etc/x"). They are printed too (progress,
		// errors): refuse control characters, which could drive a terminal.
		if !fs.ValidPath(shard) || strings.Contains(shard, `\`) || !strings.HasSuffix(shard, ".safetensors") ||
			strings.ContainsFunc(shard, unprintable) || !utf8.ValidString(shard) {
			return nil, 0, fmt.Errorf("weight_map[%q] = %q is not a safetensors file in the repo", tensor, shard)
		}
		if !slices.Contains(shards, shard) {
			shards = append(shards, shard)
		}
	}
	slices.Sort(shards)
	return shards, totalSize, nil
}

// finish sets the counts and cross-checks the index's total_size, which
// transformers computes as the sum of tensor sizes. Counts past their bounds
// (more than 10^15 parameters, a sum that would wrap) are an error: the
// headers are corrupt, and no estimate may use them.
func (m *Model) finish(shards []string, headers []safetensors.Header) error {
	counts, err := safetensors.Count(headers...)
	if err != nil {
		what := fmt.Sprintf("the %d safetensors shards", len(shards))
		if len(shards) == 1 {
			what = shards[0]
		}
		return fmt.Errorf("%s: %w", what, err)
	}
	m.Shards = shards
	m.Headers = headers
	m.Tensors = &counts
	if m.TotalSizeFromIndex > 0 && uint64(m.TotalSizeFromIndex) != counts.StoredBytes {
		m.warn(fmt.Sprintf("the index's metadata.total_size is %d bytes but the shard headers add up to %d: counts come from the headers",
			m.TotalSizeFromIndex, counts.StoredBytes))
	}
	return nil
}

// LocalModel reads a checkpoint directory: config.json and the headers of its
// safetensors shards (those the index names, else every *.safetensors),
// through ReadAt, never reading the weights.
func LocalModel(dir string) (*Model, error) {
	m := &Model{ID: dir}
	cfg, err := localfile.ReadFile(filepath.Join(dir, configFile), localfile.MaxJSON)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w; a checkpoint directory needs config.json", err)
	}
	if err != nil {
		return nil, err
	}
	m.ConfigJSON = cfg
	var shards []string
	if idx, err := localfile.ReadFile(filepath.Join(dir, indexFile), localfile.MaxJSON); err == nil {
		// A local file, named as such: not a Hub answer.
		if shards, m.TotalSizeFromIndex, err = parseIndex(idx); err != nil {
			return nil, fmt.Errorf("%s: not a safetensors index: %w", filepath.Join(dir, indexFile), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	} else {
		matches, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", dir, err)
		}
		for _, p := range matches {
			shards = append(shards, filepath.Base(p))
		}
		slices.Sort(shards)
	}
	if len(shards) == 0 {
		m.warn("no *.safetensors in the directory: counts come from config.json")
		return m, nil
	}
	headers := make([]safetensors.Header, len(shards))
	for i, shard := range shards {
		h, _, err := readLocalHeader(filepath.Join(dir, filepath.FromSlash(shard)))
		if errors.Is(err, fs.ErrNotExist) {
			// The index names a shard the directory lacks: an incomplete
			// checkpoint (a download cut short), not a mistyped path, so
			// the error does not wrap fs.ErrNotExist, which callers read
			// as "no such model".
			return nil, fmt.Errorf("%s names the shard %s, which is missing from %s: the checkpoint is incomplete; download it again", indexFile, shard, dir)
		}
		if err != nil {
			return nil, err
		}
		headers[i] = h
	}
	if err := m.finish(shards, headers); err != nil {
		return nil, err
	}
	return m, nil
}

// validateID refuses ids and revisions the Hub could not hold, following
// huggingface_hub's validate_repo_id: they become URL and cache paths, so
// "..", slashes in the wrong place and odd characters are refused up front.
func validateID(id, rev string) error {
	bad := func(why string) error {
		return &Error{Kind: ErrInvalidID, Repo: id, Revision: rev, Message: why,
			Hint: "name the model as on the Hub, org/name[@revision], or give a local directory"}
	}
	parts := strings.Split(id, "/")
	if len(id) > 96 || len(parts) > 2 {
		return bad("an id is org/name, at most 96 characters")
	}
	for _, p := range parts {
		if p == "" || strings.Contains(p, "--") || strings.Contains(p, "..") ||
			strings.Trim(p, "-.") != p || strings.IndexFunc(p, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
		}) >= 0 {
			return bad(fmt.Sprintf("%q may hold only letters, digits, '-', '_' and '.', not start or end with '-' or '.', and not contain '--' or '..'", p))
		}
	}
	if !fs.ValidPath(rev) || strings.ContainsAny(rev, "\\\x00") || rev == "." {
		return bad(fmt.Sprintf("revision %q is not a branch, tag or commit", rev))
	}
	return nil
}

func (m *Model) warn(s string) { m.Warnings = append(m.Warnings, s) }

func (m *Model) warnErr(err error) {
	if err != nil {
		m.warn("could not write the cache: " + err.Error())
	}
}

package hub

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/canifinetune/canifinetune/internal/atomicfile"
	"github.com/canifinetune/canifinetune/internal/localfile"
	"github.com/canifinetune/canifinetune/internal/safetensors"
)

// cache is a huggingface_hub cache directory (HF_HUB_CACHE):
//
//	models--{org}--{name}/
//	  refs/{revision}                 the commit the revision last resolved to
//	  blobs/{etag}                    file contents, named by ETag
//	  snapshots/{commit}/{file}       symlinks to ../../blobs/{etag}
//	  snapshots/{commit}/.canifinetune/headers/{shard}.json   shard headers (ours)
//	  .no_exist/{commit}/{file}       empty: the file is known to be absent
//
// Files are written atomically (a temporary file renamed into place), so an
// interrupted run leaves no partial file for a later offline run to trust.
type cache struct{ root string }

// headersDir is where this package keeps shard headers inside a snapshot: no
// huggingface_hub file holds them, since it downloads whole shards.
const headersDir = ".canifinetune/headers"

func (c cache) enabled() bool { return c.root != "" }

// holds reports whether the cache is on and commit can name a snapshot. The
// commit becomes a directory name: anything but a full hash (a hostile
// "../../elsewhere") is never joined into a path, whatever the caller
// checked before.
func (c cache) holds(commit string) bool { return c.enabled() && isCommit(commit) }

// writable is holds for the writes: no commit (a mirror that names none)
// means nothing to cache, and one that is no hash is an error.
func (c cache) writable(commit string) (bool, error) {
	if !c.enabled() || commit == "" {
		return false, nil
	}
	if !isCommit(commit) {
		return false, fmt.Errorf("cache: refusing commit %s: not a commit hash", quoteClipped(commit))
	}
	return true, nil
}

func (c cache) repoDir(repo string) string {
	return filepath.Join(c.root, "models--"+strings.ReplaceAll(repo, "/", "--"))
}

func (c cache) snapshotPath(repo, commit, file string) string {
	return filepath.Join(c.repoDir(repo), "snapshots", commit, filepath.FromSlash(file))
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// isCommit reports whether rev is a full commit hash, which names content
// that never changes.
func isCommit(rev string) bool { return commitRE.MatchString(rev) }

// resolve finds the commit a revision points to in the cache.
func (c cache) resolve(repo, rev string) (string, bool) {
	if !c.enabled() {
		return "", false
	}
	if isCommit(rev) {
		if fi, err := os.Stat(filepath.Join(c.repoDir(repo), "snapshots", rev)); err == nil && fi.IsDir() {
			return rev, true
		}
	}
	b, err := os.ReadFile(filepath.Join(c.repoDir(repo), "refs", filepath.FromSlash(rev)))
	if err != nil {
		return "", false
	}
	commit := strings.TrimSpace(string(b))
	if !isCommit(commit) {
		return "", false
	}
	return commit, true
}

// read returns a snapshot file, following the symlink into blobs.
func (c cache) read(repo, commit, file string) ([]byte, bool) {
	if !c.holds(commit) {
		return nil, false
	}
	b, err := localfile.ReadFile(c.snapshotPath(repo, commit, file), localfile.MaxJSON)
	return b, err == nil
}

// absent reports whether an earlier run (ours or huggingface_hub's) recorded
// that file does not exist at commit.
func (c cache) absent(repo, commit, file string) bool {
	if !c.holds(commit) {
		return false
	}
	_, err := os.Stat(filepath.Join(c.repoDir(repo), ".no_exist", commit, filepath.FromSlash(file)))
	return err == nil
}

func (c cache) writeRef(repo, rev, commit string) error {
	if ok, err := c.writable(commit); !ok || rev == commit {
		return err
	}
	return writeAtomic(filepath.Join(c.repoDir(repo), "refs", filepath.FromSlash(rev)), []byte(commit))
}

func (c cache) writeAbsent(repo, commit, file string) error {
	if ok, err := c.writable(commit); !ok {
		return err
	}
	return writeAtomic(filepath.Join(c.repoDir(repo), ".no_exist", commit, filepath.FromSlash(file)), nil)
}

var etagRE = regexp.MustCompile(`^[0-9A-Za-z._-]{1,128}$`)

// etagIsName reports whether an ETag header, unquoted, is something other
// than a path: no separator, no control character, not "." or "..". Other
// odd ETags are harmless (blobName names those blobs by their sha256); a
// path is what only a hostile server sends.
func etagIsName(etag string) bool {
	e := strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
	return e != "." && e != ".." && !strings.ContainsAny(e, `/\`) &&
		strings.IndexFunc(e, func(r rune) bool { return r < 0x20 || r == 0x7f }) < 0
}

// blobName is the blob's file name: the ETag without quotes or weak marker,
// as huggingface_hub names it, or the content's sha256 when the ETag is
// missing or could not be a safe file name.
func blobName(etag string, data []byte) string {
	e := strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
	if etagRE.MatchString(e) && e != "." && e != ".." {
		return e
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// writeFile stores a fetched file as huggingface_hub does: the content in
// blobs/, a relative symlink in the snapshot. Where symlinks are not allowed
// the snapshot gets a copy, as huggingface_hub does on Windows.
func (c cache) writeFile(repo, commit, file, etag string, data []byte) error {
	if ok, err := c.writable(commit); !ok {
		return err
	}
	blob := filepath.Join(c.repoDir(repo), "blobs", blobName(etag, data))
	if _, err := os.Stat(blob); err != nil {
		if err := writeAtomic(blob, data); err != nil {
			return err
		}
	}
	dst := c.snapshotPath(repo, commit, file)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("cache %s: %w", file, err)
	}
	rel, err := filepath.Rel(filepath.Dir(dst), blob)
	if err == nil {
		// A name of its own, as atomicfile's: concurrent runs writing the
		// same snapshot must not remove or rename each other's link.
		tmp := filepath.Join(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-link-"+strconv.FormatUint(rand.Uint64(), 36))
		if err = os.Symlink(rel, tmp); err == nil {
			if err = os.Rename(tmp, dst); err == nil {
				return nil
			}
			os.Remove(tmp)
		}
	}
	return writeAtomic(dst, data)
}

// cachedHeader is the side file holding one shard's header.
type cachedHeader struct {
	File string `json:"file"`
	// FileSize is the shard's size, -1 if the Hub did not say.
	FileSize int64 `json:"file_size"`
	// HeaderLength is N, the header's length in the shard, which the
	// compacted JSON below no longer has.
	HeaderLength uint64          `json:"header_length"`
	Header       json.RawMessage `json:"header"`
}

func (c cache) headerPath(repo, commit, shard string) string {
	return c.snapshotPath(repo, commit, path.Join(headersDir, shard+".json"))
}

// readHeader returns a shard's header from the cache: read from the shard
// itself when huggingface_hub downloaded it whole, else from our side file.
func (c cache) readHeader(repo, commit, shard string) (safetensors.Header, int64, bool, error) {
	if !c.holds(commit) {
		return safetensors.Header{}, 0, false, nil
	}
	if h, size, err := readLocalHeader(c.snapshotPath(repo, commit, shard)); err == nil {
		return h, size, true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return safetensors.Header{}, 0, false, err
	}
	b, err := localfile.ReadFile(c.headerPath(repo, commit, shard), localfile.MaxJSON)
	if errors.Is(err, fs.ErrNotExist) {
		return safetensors.Header{}, 0, false, nil
	}
	if err != nil {
		return safetensors.Header{}, 0, false, fmt.Errorf("read cached header of %s: %w", shard, err)
	}
	var ch cachedHeader
	if err := json.Unmarshal(b, &ch); err != nil {
		return safetensors.Header{}, 0, false, fmt.Errorf("cached header of %s: %w: %v", shard, ErrMalformed, err)
	}
	h, err := safetensors.ParseHeaderJSON(ch.Header)
	if err != nil {
		return safetensors.Header{}, 0, false, fmt.Errorf("cached header of %s: %w", shard, err)
	}
	h.Length = ch.HeaderLength
	return h, ch.FileSize, true, nil
}

func (c cache) writeHeader(repo, commit, shard string, raw []byte, headerLen uint64, size int64) error {
	if ok, err := c.writable(commit); !ok {
		return err
	}
	b, err := json.Marshal(cachedHeader{File: shard, FileSize: size, HeaderLength: headerLen, Header: raw})
	if err != nil {
		return fmt.Errorf("cache header of %s: %w", shard, err)
	}
	return writeAtomic(c.headerPath(repo, commit, shard), b)
}

// readLocalHeader reads a safetensors file's header through ReadAt: the
// weights after it are never read. Only a regular file is read: a FIFO
// would block, a device never ends.
func readLocalHeader(name string) (safetensors.Header, int64, error) {
	f, fi, err := localfile.Open(name)
	if err != nil {
		return safetensors.Header{}, 0, err
	}
	defer f.Close()
	h, err := safetensors.ReadHeader(f, fi.Size())
	if err != nil {
		return safetensors.Header{}, 0, fmt.Errorf("read safetensors header of %s: %w", name, err)
	}
	return h, fi.Size(), nil
}

// writeAtomic writes data to name with atomicfile.Write, creating the
// directories the cache layout needs first.
func writeAtomic(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("cache %s: %w", name, err)
	}
	if err := atomicfile.Write(name, data, 0o644); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	return nil
}

// staleTempAge is how old a temporary file must be before a run removes it:
// a write takes milliseconds, so a file this old was left by a run that
// was killed (SIGKILL, a power cut), not one still writing it.
const staleTempAge = time.Hour

// maxSweep bounds the entries sweepStale looks at in one repo's cache.
const maxSweep = 100_000

// isTempName reports whether name is one of the temporary files this
// package writes: atomicfile's ".{name}.tmp-{random}" and the snapshot
// links' ".{name}.tmp-link-{random}".
func isTempName(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-")
}

// sweepStale removes the temporary files a killed run left in repo's part
// of the cache: only names isTempName matches, only regular files and
// symlinks (never a directory, never what a link points to), only those
// older than staleTempAge, so a concurrent run's file survives. It is best
// effort: what cannot be removed stays for the next run.
func (c cache) sweepStale(repo string, now time.Time) {
	if !c.enabled() {
		return
	}
	seen := 0
	filepath.WalkDir(c.repoDir(repo), func(p string, d fs.DirEntry, err error) error {
		if seen++; seen > maxSweep {
			return filepath.SkipAll
		}
		if err != nil || d.IsDir() || !isTempName(d.Name()) {
			return nil
		}
		if t := d.Type(); t != 0 && t != fs.ModeSymlink {
			return nil
		}
		if fi, err := os.Lstat(p); err == nil && now.Sub(fi.ModTime()) > staleTempAge {
			os.Remove(p)
		}
		return nil
	})
}

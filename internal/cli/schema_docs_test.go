package cli

import (
	"github.com/canifinetune/canifinetune/internal/report"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/canifinetune/canifinetune/bench"
	"github.com/canifinetune/canifinetune/evidence"
)

// jsonPaths lists the JSON field paths a value of type ty can emit, the way
// encoding/json lays them out: "placement.fits" for a nested object,
// "components[].name" for the elements of an array, "by_method.*.n" for the
// values of an object keyed by data, and the fields of an embedded struct
// without a JSON name promoted to its parent.
func jsonPaths(ty reflect.Type) []string {
	var paths []string
	var walk func(ty reflect.Type, prefix string, depth int)
	walk = func(ty reflect.Type, prefix string, depth int) {
		if depth > 8 {
			return // recursive types: the first levels name every field
		}
		for {
			switch ty.Kind() {
			case reflect.Pointer:
				ty = ty.Elem()
				continue
			case reflect.Slice, reflect.Array:
				if ty.Elem().Kind() == reflect.Uint8 {
					return // []byte is a string
				}
				ty, prefix = ty.Elem(), prefix+"[]"
				continue
			case reflect.Map:
				ty, prefix = ty.Elem(), prefix+".*"
				continue
			}
			break
		}
		if ty.Kind() != reflect.Struct || ty == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := range ty.NumField() {
			f := ty.Field(i)
			if !f.IsExported() && !f.Anonymous {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if f.Anonymous && name == "" {
				walk(f.Type, prefix, depth) // promoted fields
				continue
			}
			if name == "" {
				name = f.Name
			}
			p := name
			if prefix != "" {
				p = prefix + "." + name
			}
			paths = append(paths, p)
			walk(f.Type, p, depth+1)
		}
	}
	walk(ty, "", 0)
	return paths
}

var (
	backticked = regexp.MustCompile("`([^`]+)`")
	heading    = regexp.MustCompile(`^#+ `)
)

// sameFields is how a document says that objects at other paths have the
// fields of one it lists: "`a.*` and `b.*` have the fields of `summary`".
const sameFields = "the fields of `"

// docIndex is what a schema document says about field paths: every
// backticked name; for each section headed by a field path (a heading whose
// backticked words are paths, "### `placement`"), the names in the first
// column of its tables, relative to that path; and which paths have the
// fields of another.
type docIndex struct {
	all      map[string]bool
	sections map[string]map[string]bool
	aliases  map[string]string
}

func readDocIndex(t *testing.T, path string) docIndex {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := docIndex{all: map[string]bool{}, sections: map[string]map[string]bool{}, aliases: map[string]string{}}
	var current []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, m := range backticked.FindAllStringSubmatch(line, -1) {
			d.all[m[1]] = true
		}
		if before, after, ok := strings.Cut(line, sameFields); ok {
			target, _, _ := strings.Cut(after, "`")
			for _, m := range backticked.FindAllStringSubmatch(before, -1) {
				d.aliases[m[1]] = target
			}
		}
		switch {
		case heading.MatchString(line):
			current = nil
			for _, m := range backticked.FindAllStringSubmatch(line, -1) {
				current = append(current, m[1])
				if d.sections[m[1]] == nil {
					d.sections[m[1]] = map[string]bool{}
				}
			}
		case strings.HasPrefix(line, "|"):
			cells := strings.Split(line, "|")
			if len(cells) < 3 {
				continue
			}
			for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
				for _, s := range current {
					d.sections[s][m[1]] = true
				}
			}
		}
	}
	return d
}

// documented reports whether the document names path: in full anywhere, as
// the rest of the path in the first column of the section headed by the
// path's prefix, or through a prefix that has the fields of another path.
func (d docIndex) documented(path string) bool {
	return d.documentedDepth(path, 0)
}

func (d docIndex) documentedDepth(path string, depth int) bool {
	if d.all[path] {
		return true
	}
	for i := range len(path) {
		if path[i] != '.' {
			continue
		}
		if rows := d.sections[path[:i]]; rows != nil && rows[path[i+1:]] {
			return true
		}
		if to, ok := d.aliases[path[:i]]; ok && depth < 4 {
			rest := to + path[i:]
			if to == "." { // the fields of the document's top level
				rest = path[i+1:]
			}
			if d.documentedDepth(rest, depth+1) {
				return true
			}
		}
	}
	return false
}

// TestJSONSchemasDocumented fails when a JSON document the tool writes has a
// field its schema document does not list, so that the documents cannot
// drift from the Go types that emit them.
func TestJSONSchemasDocumented(t *testing.T) {
	tests := []struct {
		doc   string
		types []any
	}{
		{"estimate-json.md", []any{report.Estimate{}}},
		{"plan-json.md", []any{PlanJSON{}}},
		{"validate-json.md", []any{ValidateJSON{}}},
		{"calibration-json.md", []any{evidence.Calibration{}, struct {
			CrossValidation *evidence.CrossValidation `json:"cross_validation"`
		}{}}},
		{"receipt-json.md", []any{bench.Receipt{}, sweepResult{}}},
		{"measurements-schema.md", []any{evidence.Case{}}},
		{"throughput-schema.md", []any{evidence.ThroughputCase{}}},
		{"validate-throughput-json.md", []any{ValidateThroughputJSON{}}},
	}
	for _, tt := range tests {
		t.Run(tt.doc, func(t *testing.T) {
			d := readDocIndex(t, "../../docs/"+tt.doc)
			var n int
			for _, v := range tt.types {
				for _, p := range jsonPaths(reflect.TypeOf(v)) {
					n++
					if !d.documented(p) {
						t.Errorf("JSON field `%s` (%T) is not documented in docs/%s", p, v, tt.doc)
					}
				}
			}
			if n == 0 {
				t.Fatal("no JSON fields found: the walk is broken")
			}
		})
	}
}

// The walk itself, on a type with every shape it handles.
func TestJSONPaths(t *testing.T) {
	type inner struct {
		A int `json:"a"`
	}
	type Embedded struct {
		E int `json:"e"`
	}
	type outer struct {
		Embedded
		Plain   int              `json:"plain,omitempty"`
		Ptr     *inner           `json:"ptr"`
		List    []inner          `json:"list"`
		ByKey   map[string]inner `json:"by_key"`
		Skipped int              `json:"-"`
		Raw     []byte           `json:"raw"`
		When    time.Time        `json:"when"`
		hidden  int
	}
	_ = outer{}.hidden
	got := jsonPaths(reflect.TypeOf(outer{}))
	want := []string{"e", "plain", "ptr", "ptr.a", "list", "list[].a", "by_key", "by_key.*.a", "raw", "when"}
	if !slices.Equal(got, want) {
		t.Errorf("jsonPaths = %q, want %q", got, want)
	}
}

// What counts as documented: a full path anywhere, a row of the section
// headed by the path's prefix, or a prefix that has the fields of another
// path (or of the top level, "."); nothing else.
func TestDocIndex(t *testing.T) {
	doc := "# Doc\n\n| `top` | x |\n| `a.b` | x |\n\n### `sec[]`\n\n| `c`, `d.e` | x |\n\n" +
		"`other[]` has the fields of `sec[]`.\n`all[]` has the fields of `.`\n\nprose `f.g` and `loose`\n"
	path := t.TempDir() + "/doc.md"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	d := readDocIndex(t, path)
	for p, want := range map[string]bool{
		"top": true, "a.b": true, "sec[].c": true, "sec[].d.e": true, "f.g": true,
		"other[].c": true, "other[].d.e": true, "all[].top": true, "all[].sec[].c": true,
		"sec[].x": false, "a.c": false, "other[].x": false, "all[].nope": false, "top.loose": false, "x.c": false,
	} {
		if got := d.documented(p); got != want {
			t.Errorf("documented(%q) = %v, want %v", p, got, want)
		}
	}
}

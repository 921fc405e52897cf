package trace

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestSchemaDocumented fails when a JSON field of the report types is not
// in docs/trace-json.md, so the documented schema cannot drift silently.
func TestSchemaDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/trace-json.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		for i := range ty.NumField() {
			f := ty.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "" || name == "-" {
				continue
			}
			if !strings.Contains(string(doc), "`"+name+"`") && !strings.Contains(string(doc), "`"+name+"[]`") {
				t.Errorf("%s.%s: JSON field `%s` is not documented in docs/trace-json.md", ty.Name(), f.Name, name)
			}
			walk(f.Type)
		}
	}
	for _, v := range []any{Report{}, Comparison{}, Projection{}, RankReport{}} {
		walk(reflect.TypeOf(v))
	}
	for _, c := range Categories() {
		if !strings.Contains(string(doc), c.String()) {
			t.Errorf("category %s is not in docs/trace-json.md", c)
		}
	}
}

// TestCategoryRulesDocumented keeps the rule table in doc.go true.
func TestCategoryRulesDocumented(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	start, end := strings.Index(doc, "# Categories"), strings.Index(doc, "The order matters")
	if start < 0 || end < start {
		t.Fatal("doc.go has no category table")
	}
	table := doc[start:end]
	for _, r := range categoryRules {
		for _, w := range r.words {
			if !strings.Contains(table, " "+w) {
				t.Errorf("rule word %q of %s is missing from the table in doc.go", w, r.cat)
			}
		}
	}
}

package web

import (
	"archive/zip"
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/canifinetune/canifinetune/recipe"
)

// recipeParamNames are /api/plan/recipe's parameters: the plan view's and
// the rank of the plan whose files to download.
var recipeParamNames = append(append([]string{}, planParamNames...), "plan")

// handleRecipeAPI answers with a zip of the files `canifinetune plan
// --emit DIR --emit-plan N` writes for the page's query: the same files,
// from the same code, byte for byte.
func (s *Server) handleRecipeAPI(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	p, pr := parseValues(r.URL.Query(), recipeParamNames)
	rank := 1
	if pr == nil {
		if v, ok := p["plan"]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				pr = badParam("plan", "plan %s: want a plan's rank, 1 or more", quoteHost(v))
			}
			rank = n
			delete(p, "plan")
		}
	}
	var files map[string][]byte
	if pr == nil {
		files, pr = s.runRecipe(r, p, rank)
	}
	if pr != nil {
		writeProblem(w, pr)
		return
	}
	b, err := zipRecipe(files)
	if err != nil {
		writeProblem(w, &Problem{Status: http.StatusInternalServerError, Message: "zip: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/zip")
	w.Header().Set("Content-Disposition", `attachment; filename="`+recipeZipName(p["model"], rank)+`"`)
	w.Write(b)
}

// runRecipe runs the backend's recipe emission with the plan's checks.
func (s *Server) runRecipe(r *http.Request, p Params, rank int) (map[string][]byte, *Problem) {
	if s.opts.Backend.Recipe == nil {
		return nil, &Problem{Status: http.StatusNotImplemented, Message: "this server has no recipe backend"}
	}
	if p["maximize"] != "" {
		return nil, badParam("maximize", "a recipe is a ranked plan's files; maximize ranks none")
	}
	args, pr := planArgs(p)
	if pr != nil {
		return nil, pr
	}
	release, pr := acquire(r, s.planSem, "another plan search")
	if pr != nil {
		return nil, pr
	}
	defer release()
	files, errb, code := s.opts.Backend.Recipe(args, rank)
	switch code {
	case 0:
		return files, nil
	case 2:
		pr := cliProblem(http.StatusBadRequest, errb)
		if strings.HasPrefix(pr.Message, "--emit-plan") {
			pr.Field = "plan"
		}
		return nil, pr
	case 4:
		return nil, &Problem{Status: http.StatusUnprocessableEntity, Message: "no plan fits: there are no files to download (the plan view says which constraint binds)"}
	case 1:
		// A plan the stacks cannot run as estimated: the reason, and the
		// first plan that can be written.
		return nil, cliProblem(http.StatusUnprocessableEntity, errb)
	default:
		return nil, cliProblem(http.StatusInternalServerError, errb)
	}
}

// zipRecipe packs the files under one folder, scripts executable.
func zipRecipe(files map[string][]byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	// A fixed time: the same plan gives the same archive.
	mod := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range recipe.Names(files) {
		h := &zip.FileHeader{Name: "recipe/" + name, Method: zip.Deflate, Modified: mod}
		h.SetMode(0o644)
		if strings.HasSuffix(name, ".sh") || strings.HasSuffix(name, ".py") {
			h.SetMode(0o755)
		}
		f, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := f.Write(files[name]); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// recipeZipName is the download's file name: the model id with anything
// but letters, digits, '.', '-' and '_' made '_'.
func recipeZipName(model string, rank int) string {
	clean := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, model)
	return "recipe-" + clean + "-plan" + strconv.Itoa(rank) + ".zip"
}

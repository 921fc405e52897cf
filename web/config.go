package web

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"

	"github.com/canifinetune/canifinetune/hfconfig"
	"github.com/canifinetune/canifinetune/modelsource"
)

// MaxConfigBytes bounds an uploaded config.json: real configs are a few
// KB, the largest (long label maps, vision sub-configs) tens of KB.
const MaxConfigBytes = 1 << 20

// uploadPrefix starts the model name of an uploaded config: config:
// followed by the first 16 hex digits of its SHA-256, so that the page's
// URL names the upload and a link reproduces the view while the server
// keeps it.
const uploadPrefix = "config:"

// maxUploads is how many uploaded configs the server keeps (in memory, the
// oldest dropped first): at most maxUploads × MaxConfigBytes.
const maxUploads = 64

// uploads are the config.json files uploaded to this server, by name.
type uploads struct {
	mu    sync.Mutex
	order []string
	files map[string]upload
}

type upload struct {
	filename string
	config   []byte
}

// add parses a config.json as `estimate path/config.json` does and keeps
// it; the name it returns is the page's model parameter for it.
func (u *uploads) add(filename string, b []byte) (string, *Problem) {
	if _, err := hfconfig.Parse(b); err != nil {
		return "", &Problem{Status: 400, Field: "config", Message: fmt.Sprintf("%s: %v", filename, err), Hint: "upload a model's config.json (as on the Hub, next to its weights)"}
	}
	sum := sha256.Sum256(b)
	name := uploadPrefix + hex.EncodeToString(sum[:8])
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.files == nil {
		u.files = map[string]upload{}
	}
	if _, ok := u.files[name]; !ok {
		if len(u.order) >= maxUploads {
			delete(u.files, u.order[0])
			u.order = u.order[1:]
		}
		u.order = append(u.order, name)
	}
	u.files[name] = upload{filename: filename, config: b}
	return name, nil
}

// resolve parses the uploaded config of name afresh: a parse is cheap, and
// each request gets its own model.
func (u *uploads) resolve(name string) (*modelsource.Resolved, *Problem) {
	u.mu.Lock()
	f, ok := u.files[name]
	u.mu.Unlock()
	if !ok {
		return nil, &Problem{Status: 404, Field: "model", Message: fmt.Sprintf("model %s: no such uploaded config on this server (it keeps the last %d uploads, in memory, until it stops)", name, maxUploads),
			Hint: "upload the config.json again"}
	}
	m, err := hfconfig.Parse(f.config)
	if err != nil {
		return nil, &Problem{Status: 500, Field: "model", Message: fmt.Sprintf("%s: %v", f.filename, err)}
	}
	return &modelsource.Resolved{Name: name, ID: f.filename + " (" + name + ")", From: modelsource.FromLocal,
		Source: "uploaded " + f.filename + " (sha256 " + name[len(uploadPrefix):] + "…)", Model: m, ConfigJSON: f.config, ConfigParams: m.ConfigParams()}, nil
}

// readConfigUpload reads a multipart upload: the file in field "config",
// and the page's other parameters (kept for the view it redirects to).
func (s *Server) readConfigUpload(r *http.Request) (string, Params, *Problem) {
	mr, err := r.MultipartReader()
	if err != nil {
		return "", nil, &Problem{Status: http.StatusUnsupportedMediaType, Field: "config", Message: "upload config.json as multipart/form-data, in field \"config\": " + err.Error(),
			Hint: "curl -F config=@config.json http://127.0.0.1:PORT/api/config"}
	}
	p := Params{}
	name := ""
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", nil, configBodyProblem(err)
		}
		field := part.FormName()
		if field == "config" {
			if name != "" {
				return "", nil, badParam("config", "more than one file in field \"config\"")
			}
			b, err := io.ReadAll(io.LimitReader(part, MaxConfigBytes+1))
			if err != nil {
				return "", nil, configBodyProblem(err)
			}
			fn := uploadName(part)
			if len(b) > MaxConfigBytes {
				return "", nil, &Problem{Status: http.StatusRequestEntityTooLarge, Field: "config", Message: fmt.Sprintf("%s: over %s, the limit of an uploaded config.json", fn, sizeWords(MaxConfigBytes))}
			}
			var pr *Problem
			if name, pr = s.uploads.add(fn, b); pr != nil {
				return "", nil, pr
			}
			continue
		}
		if !slices.Contains(paramNames, field) || field == "model" {
			return "", nil, badParam(field, "unknown upload field %q (known: config, and the page's parameters but model)", field)
		}
		b, err := io.ReadAll(io.LimitReader(part, maxParamLen+1))
		if err != nil {
			return "", nil, configBodyProblem(err)
		}
		if len(b) > maxParamLen {
			return "", nil, badParam(field, "parameter %q is over %d bytes", field, maxParamLen)
		}
		if v := string(b); v != "" {
			p[field] = v
		}
	}
	if name == "" {
		return "", nil, &Problem{Status: 400, Field: "config", Message: "no file in field \"config\"", Hint: "curl -F config=@config.json http://127.0.0.1:PORT/api/config"}
	}
	p["model"] = name
	return name, p, nil
}

func configBodyProblem(err error) *Problem {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return &Problem{Status: http.StatusRequestEntityTooLarge, Field: "config", Message: "upload over " + sizeWords(maxConfigBody) + ": a config.json is at most " + sizeWords(MaxConfigBytes)}
	}
	return &Problem{Status: http.StatusBadRequest, Field: "config", Message: "config upload: " + err.Error()}
}

// maxConfigBody bounds the whole multipart body of a config upload: the
// file and the page's parameters.
const maxConfigBody = MaxConfigBytes + 64<<10

// ConfigUpload is the answer of POST /api/config.
type ConfigUpload struct {
	// Model is the name to estimate it by (the model parameter).
	Model     string `json:"model"`
	ModelType string `json:"model_type"`
	Params    int64  `json:"config_params"`
}

// handleConfigAPI keeps an uploaded config.json and answers with its name.
func (s *Server) handleConfigAPI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeProblem(w, &Problem{Status: http.StatusMethodNotAllowed, Message: "method " + r.Method + " not allowed: POST config.json as multipart/form-data in field \"config\""})
		return
	}
	name, _, pr := s.readConfigUpload(r)
	if pr != nil {
		writeProblem(w, pr)
		return
	}
	rm, pr := s.uploads.resolve(name)
	if pr != nil {
		writeProblem(w, pr)
		return
	}
	writeJSON(w, http.StatusOK, ConfigUpload{Model: name, ModelType: rm.Model.ModelType, Params: rm.ConfigParams})
}

// handleConfigPage keeps the page's uploaded config.json and shows the
// calculator for it (303 to the view's URL), or the page with the error.
func (s *Server) handleConfigPage(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeProblem(w, &Problem{Status: http.StatusMethodNotAllowed, Message: "method " + r.Method + " not allowed: the page POSTs the upload"})
		return
	}
	_, p, pr := s.readConfigUpload(r)
	if pr != nil {
		s.renderPage(w, r, Params{}, pr)
		return
	}
	http.Redirect(w, r, "/?"+p.Query(), http.StatusSeeOther)
}

package web

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/canifinetune/canifinetune/catalog"
	"github.com/canifinetune/canifinetune/estimate"
	"github.com/canifinetune/canifinetune/gpu"
	"github.com/canifinetune/canifinetune/internal/report"
	"github.com/canifinetune/canifinetune/modelsource"
)

//go:embed assets
var assets embed.FS

// MaxBodyBytes bounds a request body: an estimate's parameters fit in far
// less, and a server that reads what it is sent must stop somewhere.
const MaxBodyBytes = 64 << 10

// Options configure a Server.
type Options struct {
	// Addr is the address the server listens on, host:port, after the
	// listener is open (the port a :0 address got). Requests must name it
	// in their Host header, as localhost, 127.0.0.1 or [::1] with this port.
	Addr string
	// AllowRemote turns the Host check off: the server was bound to a
	// non-loopback address on purpose (--allow-remote).
	AllowRemote bool
	// Backend is the command line's work behind /plan, /doctor and /trace
	// (cli.WebBackend); without it those routes answer 501.
	Backend Backend
	// MaxTraceBytes bounds a trace upload (the whole multipart body);
	// 0 is DefaultMaxTraceBytes.
	MaxTraceBytes int64
	// Hub reads the models the catalog lacks and answers the model search;
	// nil: the catalog only.
	Hub Hub
	// Offline says Hub reads only the Hugging Face cache (HF_HUB_OFFLINE,
	// --offline): the page says so, and searches the cache.
	Offline bool
}

// DefaultMaxTraceBytes bounds a trace upload: a profiler window of a few
// steps is tens of MB gzipped; the analysis streams, so the bound is about
// the time a request may take, not memory.
const DefaultMaxTraceBytes = 1 << 30

// Server is the page and the API.
type Server struct {
	opts     Options
	port     string
	page     *template.Template
	measured *measuredError
	models   []report.ModelRow
	gpus     report.GPUs
	// form and planForm are the page's and the plan view's controls, which
	// depend only on the build (catalog, GPU table, estimators): made once.
	form     view
	planForm []planField
	mux      *http.ServeMux
	// planSem, traceSem and doctorSem bound the work running at once: a
	// plan search, a trace analysis and a GPU probe each cost far more
	// than an estimate.
	planSem, traceSem, doctorSem chan struct{}
	// hubSem bounds the Hub reads at once; resolved and searches keep the
	// Hub's answers a while, so a page's changes do not ask again.
	hubSem   chan struct{}
	resolved *memo[*modelsource.Resolved]
	searches *memo[[]string]
	uploads  uploads
}

// New builds a Server: it parses the page's template and scores every
// estimator on the development cohort once, so that requests only look up.
func New(o Options) (*Server, error) {
	_, port, err := net.SplitHostPort(o.Addr)
	if err != nil && !o.AllowRemote {
		return nil, errors.New("web: Options.Addr must be host:port, the listener's address")
	}
	t, err := template.New("").Funcs(funcs).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, err
	}
	m, err := scoreCohort()
	if err != nil {
		return nil, err
	}
	s := &Server{opts: o, port: port, page: t, measured: m,
		models: report.NewModels(catalog.All()), gpus: report.NewGPUs(gpu.Cards()), mux: http.NewServeMux(),
		form:     view{Controls: controls(), Models: modelIDs(), GPUs: gpuChoices(), Estimators: estimatorChoices(), Datasets: datasetChoices(), Yes: estimate.YesRatio, Marginal: estimate.MarginalRatio},
		planForm: planFields(),
		hubSem:   make(chan struct{}, 4), resolved: newMemo[*modelsource.Resolved](256, 10*time.Minute), searches: newMemo[[]string](256, 5*time.Minute)}
	s.form.MaxConfig = sizeWords(MaxConfigBytes)
	static, _ := fs.Sub(assets, "assets/static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("/{$}", s.handlePage)
	s.mux.HandleFunc("/api/estimate", s.handleEstimate)
	s.mux.HandleFunc("/api/models", s.handleModels)
	s.mux.HandleFunc("/api/gpus", s.handleGPUs)
	s.mux.HandleFunc("/api/search", s.handleSearch)
	s.mux.HandleFunc("/api/config", s.handleConfigAPI)
	s.mux.HandleFunc("/config", s.handleConfigPage)
	s.mux.HandleFunc("/api/plan", s.handlePlanAPI)
	s.mux.HandleFunc("/api/plan/recipe", s.handleRecipeAPI)
	s.mux.HandleFunc("/plan", s.handlePlanPage)
	s.mux.HandleFunc("/api/doctor", s.handleDoctorAPI)
	s.mux.HandleFunc("/doctor", s.handleDoctorPage)
	s.mux.HandleFunc("/api/trace", s.handleTraceAPI)
	s.mux.HandleFunc("/trace", s.handleTracePage)
	if s.opts.MaxTraceBytes <= 0 {
		s.opts.MaxTraceBytes = DefaultMaxTraceBytes
	}
	s.planSem = make(chan struct{}, 2)
	s.traceSem = make(chan struct{}, 1)
	s.doctorSem = make(chan struct{}, 1)
	return s, nil
}

// Handler is the server's handler with its checks: the Host header (DNS
// rebinding), the Origin of a POST (cross-site requests), the body limit,
// and headers that keep the page from being framed or sniffed.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
		if !s.opts.AllowRemote && !s.hostAllowed(r.Host) {
			writeProblem(w, &Problem{Status: http.StatusForbidden, Message: "host " + quoteHost(r.Host) + " is not this server's loopback address: the page answers localhost, 127.0.0.1 or [::1] on port " + s.port + " only (a DNS rebinding guard)"})
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
			writeProblem(w, &Problem{Status: http.StatusForbidden, Message: "cross-origin request refused: Origin " + quoteHost(r.Header.Get("Origin")) + " is not " + r.Host})
			return
		}
		limit := int64(MaxBodyBytes)
		switch r.URL.Path {
		case "/api/trace", "/trace":
			limit = s.opts.MaxTraceBytes
		case "/api/config", "/config":
			limit = maxConfigBody
		}
		r.Body = http.MaxBytesReader(w, r.Body, limit)
		s.mux.ServeHTTP(w, r)
	})
}

// NewHTTPServer is an http.Server for h with the timeouts a server on a
// user's machine needs: a slow or idle client cannot hold a connection.
func NewHTTPServer(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10}
}

// hostAllowed: a browser that resolved another name to 127.0.0.1 sends that
// name, so only the loopback names with our port pass.
func (s *Server) hostAllowed(host string) bool {
	h, p, err := net.SplitHostPort(host)
	if err != nil || p != s.port {
		return false
	}
	switch strings.ToLower(h) {
	case "localhost", "127.0.0.1", "::1":
		return true
	}
	return false
}

// sameOrigin: a browser names the page a request comes from in Origin (and
// Sec-Fetch-Site); a request without either is not from a browser page.
//
// Sec-Fetch-Site is set by the browser and cannot be set by a page's
// script; "same-origin" settles it even when Origin is "null", as Chromium
// sends for a form's POST under this server's Referrer-Policy: no-referrer.
func sameOrigin(r *http.Request) bool {
	site := r.Header.Get("Sec-Fetch-Site")
	if site == "same-origin" {
		return true
	}
	if site != "" && site != "none" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
}

func quoteHost(h string) string {
	if len(h) > 100 {
		h = h[:100] + "…"
	}
	b, _ := json.Marshal(h)
	return string(b)
}

func (s *Server) handleEstimate(w http.ResponseWriter, r *http.Request) {
	var p Params
	var pr *Problem
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		p, pr = ParseQuery(r.URL.Query())
	case http.MethodPost:
		if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
			pr = &Problem{Status: http.StatusUnsupportedMediaType, Message: "Content-Type " + quoteHost(ct) + ": POST a JSON object (application/json)"}
			break
		}
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(r.Body); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				pr = &Problem{Status: http.StatusRequestEntityTooLarge, Message: "request body over " + byteLimit + ": an estimate's parameters fit in far less"}
			} else {
				pr = &Problem{Status: http.StatusBadRequest, Message: "request body: " + err.Error()}
			}
			break
		}
		p, pr = ParseJSON(buf.Bytes())
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		pr = &Problem{Status: http.StatusMethodNotAllowed, Message: "method " + r.Method + " not allowed: GET with the page's query, or POST a JSON object"}
	}
	if pr != nil {
		writeProblem(w, pr)
		return
	}
	out, pr := s.estimate(r.Context(), p)
	if pr != nil {
		writeProblem(w, pr)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

const byteLimit = "64 KiB"

func (s *Server) handleModels(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, s.models)
}

func (s *Server) handleGPUs(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, s.gpus)
}

func getOnly(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeProblem(w, &Problem{Status: http.StatusMethodNotAllowed, Message: "method " + r.Method + " not allowed: GET"})
	return false
}

// writeJSON writes v as the CLI's --json does (two-space indent, a final
// newline), so that the API's bytes equal the command's.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

func writeProblem(w http.ResponseWriter, p *Problem) {
	writeJSON(w, p.Status, p)
}

// acquire takes a slot of sem for r, waiting while other requests hold
// them all; it returns the slot's release, or a 503 naming what r waited
// for when r is cancelled first.
func acquire(r *http.Request, sem chan struct{}, waitingFor string) (release func(), _ *Problem) {
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-r.Context().Done():
		return nil, &Problem{Status: http.StatusServiceUnavailable, Message: "request cancelled while waiting for " + waitingFor}
	}
}

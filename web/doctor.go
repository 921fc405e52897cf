package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"

	"github.com/canifinetune/canifinetune/gpu/probe"
)

// runDoctor probes this machine's GPUs through the backend, one probe at a
// time: nvidia-smi is not something a page should start in parallel.
func (s *Server) runDoctor(r *http.Request) ([]byte, *Problem) {
	if s.opts.Backend.Doctor == nil {
		return nil, &Problem{Status: http.StatusNotImplemented, Message: "this server has no doctor backend"}
	}
	release, pr := acquire(r, s.doctorSem, "another GPU probe")
	if pr != nil {
		return nil, pr
	}
	defer release()
	out, err := s.opts.Backend.Doctor(r.Context())
	if err != nil {
		pr := &Problem{Status: http.StatusBadGateway, Message: "read the GPUs: " + err.Error(), Hint: "canifinetune doctor  (run nvidia-smi yourself)"}
		if errors.Is(err, probe.ErrProbeTimeout) {
			pr.Status, pr.Hint = http.StatusGatewayTimeout, "a wedged driver makes nvidia-smi hang; run canifinetune doctor --timeout 60s"
		}
		return nil, pr
	}
	return out, nil
}

// handleDoctorAPI answers with the document of `canifinetune doctor --json`,
// without its Python probe ("python": null).
func (s *Server) handleDoctorAPI(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	if len(r.URL.Query()) > 0 {
		writeProblem(w, badParam("", "/api/doctor takes no parameters"))
		return
	}
	out, pr := s.runDoctor(r)
	if pr != nil {
		writeProblem(w, pr)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Write(out)
}

// doctorDoc is the part of doctor's document the page shows.
type doctorDoc struct {
	Tool          string `json:"tool"`
	DriverVersion string `json:"driver_version"`
	CUDAVersion   string `json:"cuda_version"`
	GPUs          []struct {
		Index             int      `json:"index"`
		Name              string   `json:"name"`
		TotalGB           *float64 `json:"total_gb"`
		UsedGB            *float64 `json:"used_gb"`
		FreeGB            *float64 `json:"free_gb"`
		ComputeCapability string   `json:"compute_capability"`
		MIG               bool     `json:"mig"`
		Card              *string  `json:"card"`
	} `json:"gpus"`
	Processes []struct {
		GPUIndex int      `json:"gpu_index"`
		PID      int      `json:"pid"`
		Name     string   `json:"name"`
		UsedGB   *float64 `json:"used_gb"`
	} `json:"processes"`
	Findings []struct {
		Severity string `json:"severity"`
		Message  string `json:"message"`
		Hint     string `json:"hint"`
	} `json:"findings"`
	Warnings []string `json:"warnings"`
}

type doctorView struct {
	Nav     string
	Doc     *doctorDoc
	Links   []template.URL // per GPU: the calculator with its total and free memory
	Problem *Problem
}

// handleDoctorPage shows the detected GPUs, free against total, with a
// link to the calculator for each.
func (s *Server) handleDoctorPage(w http.ResponseWriter, r *http.Request) {
	if !getOnly(w, r) {
		return
	}
	v := doctorView{Nav: "doctor"}
	status := http.StatusOK
	out, pr := s.runDoctor(r)
	if pr == nil {
		v.Doc = &doctorDoc{}
		if err := json.Unmarshal(out, v.Doc); err != nil {
			pr = &Problem{Status: 500, Message: "doctor's JSON: " + err.Error()}
		}
	}
	if pr != nil {
		v.Problem, status, v.Doc = pr, pr.Status, nil
	}
	if v.Doc != nil {
		for _, g := range v.Doc.GPUs {
			q := url.Values{}
			if g.TotalGB != nil {
				q.Set("gpu-vram-gb", fmt.Sprintf("%.2f", *g.TotalGB))
			}
			if g.FreeGB != nil && g.TotalGB != nil && *g.FreeGB < *g.TotalGB {
				q.Set("available-vram-gb", fmt.Sprintf("%.2f", *g.FreeGB))
			}
			// Encode escapes every byte that needs it.
			v.Links = append(v.Links, template.URL(q.Encode()))
		}
	}
	s.render(w, status, "doctor.html", v)
}

package gpu

import (
	"fmt"
	"iter"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// GPUQueryFields are the fields the real probe asks nvidia-smi for, in order:
//
//	nvidia-smi --query-gpu=<GPUQueryFields joined by ","> --format=csv,noheader,nounits
//
// compute_cap needs driver ≥ 510; older drivers reject it and the probe
// retries with LegacyGPUQueryFields.
var GPUQueryFields = []string{"index", "name", "uuid", "memory.total", "memory.used", "memory.free", "driver_version", "compute_cap", "mig.mode.current"}

// LegacyGPUQueryFields are asked of drivers that reject compute_cap.
var LegacyGPUQueryFields = []string{"index", "name", "uuid", "memory.total", "memory.used", "memory.free", "driver_version"}

// AppQueryFields are the fields of the compute-apps query:
//
//	nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits
var AppQueryFields = []string{"gpu_uuid", "pid", "process_name", "used_memory"}

// notAvailable reports whether an nvidia-smi value means "no value".
func notAvailable(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", "[insufficient permissions]", "[gpu is lost]":
		return true
	}
	return false
}

// parseMiB parses a memory value in MiB ("24564", "24564 MiB"); Unknown
// for "[N/A]" and friends.
func parseMiB(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if notAvailable(v) {
		return Unknown, nil
	}
	v = strings.TrimSpace(strings.TrimSuffix(v, "MiB"))
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("memory value %q is not a number of MiB", v)
	}
	return n, nil
}

// splitCSV splits an nvidia-smi CSV row. nvidia-smi neither quotes nor
// escapes, and no field it prints here contains a comma except a process
// name, which the caller rejoins.
func splitCSV(line string) []string {
	parts := strings.Split(line, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// rows yields the non-blank lines of a query's output, trimmed, with their
// 1-based line numbers for warnings.
func rows(out string) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		n := 0
		for line := range strings.Lines(out) {
			n++
			if text := strings.TrimSpace(line); text != "" && !yield(n, text) {
				return
			}
		}
	}
}

// ParseGPUQuery parses the output of nvidia-smi --query-gpu=<fields>
// --format=csv,noheader,nounits. fields must list, in order, the fields that
// were asked (GPUQueryFields or LegacyGPUQueryFields); "index" and "name" are
// required. Rows that do not parse are skipped with a warning; the driver
// version is returned from the first row that has one. Devices are returned
// with their Card matched from the table.
func ParseGPUQuery(out string, fields []string) (devs []Device, driver string, warnings []string) {
	col := map[string]int{}
	for i, f := range fields {
		col[f] = i
	}
	get := func(row []string, f string) (string, bool) {
		i, ok := col[f]
		if !ok || i >= len(row) {
			return "", false
		}
		return row[i], true
	}
	for line, text := range rows(out) {
		row := splitCSV(text)
		if len(row) != len(fields) {
			warnings = append(warnings, fmt.Sprintf("nvidia-smi GPU row %d has %d fields, want %d: %q", line, len(row), len(fields), clip(text)))
			continue
		}
		d := Device{TotalMiB: Unknown, UsedMiB: Unknown, FreeMiB: Unknown}
		idx, _ := get(row, "index")
		n, err := strconv.Atoi(idx)
		if err != nil || n < 0 {
			warnings = append(warnings, fmt.Sprintf("nvidia-smi GPU row %d: index %q is not a number", line, idx))
			continue
		}
		d.Index = n
		d.Name, _ = get(row, "name")
		if notAvailable(d.Name) {
			warnings = append(warnings, fmt.Sprintf("nvidia-smi GPU row %d: no name", line))
			continue
		}
		if u, _ := get(row, "uuid"); !notAvailable(u) {
			d.UUID = u
		}
		bad := false
		for _, m := range []struct {
			field string
			dst   *int64
		}{{"memory.total", &d.TotalMiB}, {"memory.used", &d.UsedMiB}, {"memory.free", &d.FreeMiB}} {
			v, ok := get(row, m.field)
			if !ok {
				continue
			}
			mib, err := parseMiB(v)
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("nvidia-smi GPU %d %s: %v", n, m.field, err))
				bad = true
				continue
			}
			*m.dst = mib
		}
		if bad {
			continue
		}
		// Some drivers leave free unreported while total and used are known.
		if d.FreeMiB == Unknown && d.TotalMiB >= 0 && d.UsedMiB >= 0 && d.UsedMiB <= d.TotalMiB {
			d.FreeMiB = d.TotalMiB - d.UsedMiB
		}
		if cc, _ := get(row, "compute_cap"); !notAvailable(cc) {
			d.ComputeCapability = cc
		}
		if mig, _ := get(row, "mig.mode.current"); strings.EqualFold(mig, "Enabled") {
			d.MIG = true
		}
		if v, _ := get(row, "driver_version"); driver == "" && !notAvailable(v) {
			driver = v
		}
		devs = append(devs, d)
	}
	matchCards(devs)
	return devs, driver, warnings
}

// ParseAppQuery parses the output of nvidia-smi --query-compute-apps=
// gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits.
// GPUIndex is resolved from devs by UUID (-1 when no device has it).
func ParseAppQuery(out string, devs []Device) (procs []Process, warnings []string) {
	byUUID := map[string]int{}
	for _, d := range devs {
		if d.UUID != "" {
			byUUID[d.UUID] = d.Index
		}
	}
	for line, text := range rows(out) {
		if strings.HasPrefix(text, "No running") {
			continue
		}
		row := splitCSV(text)
		if len(row) < 4 {
			warnings = append(warnings, fmt.Sprintf("nvidia-smi process row %d has %d fields, want 4: %q", line, len(row), clip(text)))
			continue
		}
		// A process name may contain commas: it is everything between the
		// pid's comma and the last comma, as printed.
		first := strings.Index(text, ",")
		second := first + 1 + strings.Index(text[first+1:], ",")
		name := strings.TrimSpace(text[second+1 : strings.LastIndex(text, ",")])
		pid, err := strconv.Atoi(row[1])
		if err != nil || pid < 0 {
			warnings = append(warnings, fmt.Sprintf("nvidia-smi process row %d: pid %q is not a number", line, row[1]))
			continue
		}
		mib, err := parseMiB(row[len(row)-1])
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("nvidia-smi process %d: %v", pid, err))
			mib = Unknown
		}
		gi, ok := byUUID[row[0]]
		if !ok {
			gi = -1
		}
		procs = append(procs, Process{GPUIndex: gi, GPUUUID: row[0], PID: pid, Name: name, Type: "C", UsedMiB: mib})
	}
	return procs, warnings
}

var (
	driverRE = regexp.MustCompile(`Driver Version:\s*([0-9][0-9.]*)`)
	cudaRE   = regexp.MustCompile(`CUDA Version:\s*([0-9][0-9.]*|N/A)`)
	// A process row of the banner's table:
	// "|    0   N/A  N/A      1234      G   /usr/lib/xorg/Xorg     412MiB |"
	// (older drivers omit the GI/CI columns).
	procRowRE = regexp.MustCompile(`^\|\s+(\d+)\s+(?:(?:N/A|\d+)\s+(?:N/A|\d+)\s+)?(\d+)\s+(C\+G|M\+C|C|G|M)\s+(\S.*?)\s+(\d+MiB|N/A)\s*\|$`)
)

// Banner is what the plain `nvidia-smi` output adds to the queries: the CUDA
// version the driver supports and the graphics processes (Xorg, compositors,
// browsers), which --query-compute-apps does not list.
type Banner struct {
	Driver    string
	CUDA      string
	Processes []Process
}

// ParseBanner parses the human output of plain `nvidia-smi`. It is lenient:
// whatever it cannot read is simply absent.
func ParseBanner(out string) Banner {
	var b Banner
	if m := driverRE.FindStringSubmatch(out); m != nil {
		b.Driver = m[1]
	}
	if m := cudaRE.FindStringSubmatch(out); m != nil && m[1] != "N/A" {
		b.CUDA = m[1]
	}
	inProcs := false
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimRight(line, "\r ")
		if strings.Contains(line, "Processes:") {
			inProcs = true
			continue
		}
		if !inProcs {
			continue
		}
		m := procRowRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		gi, err1 := strconv.Atoi(m[1])
		pid, err2 := strconv.Atoi(m[2])
		if err1 != nil || err2 != nil {
			continue
		}
		// RE2's \s does not cover every Unicode space (a vertical tab is \S
		// to it), so a name can be blank once trimmed: such a row names
		// no process.
		name := strings.TrimSpace(m[4])
		if name == "" {
			continue
		}
		mib, err := parseMiB(m[5])
		if err != nil {
			mib = Unknown
		}
		b.Processes = append(b.Processes, Process{GPUIndex: gi, PID: pid, Type: m[3], Name: name, UsedMiB: mib})
	}
	return b
}

// mergeProcesses combines the banner's table (every type, names possibly
// truncated) with the compute-apps query (full names, UUIDs): a process in
// both keeps the query's name and memory and the banner's type.
func mergeProcesses(banner, apps []Process, devs []Device) []Process {
	uuidOf := map[int]string{}
	for _, d := range devs {
		uuidOf[d.Index] = d.UUID
	}
	out := make([]Process, 0, len(banner)+len(apps))
	used := make([]bool, len(apps))
	for _, b := range banner {
		if b.GPUUUID == "" {
			b.GPUUUID = uuidOf[b.GPUIndex]
		}
		for i, a := range apps {
			if !used[i] && a.PID == b.PID && (a.GPUIndex == b.GPUIndex || a.GPUIndex < 0) {
				used[i] = true
				b.Name = a.Name
				if a.UsedMiB >= 0 {
					b.UsedMiB = a.UsedMiB
				}
				break
			}
		}
		out = append(out, b)
	}
	for i, a := range apps {
		if !used[i] {
			out = append(out, a)
		}
	}
	return out
}

// NVIDIAAnswers are nvidia-smi's answers to the three questions a probe
// asks: the GPU query, the compute-apps query and plain nvidia-smi (for the
// CUDA version and graphics processes). The probe runs the tool; this
// package only reads what it printed.
type NVIDIAAnswers struct {
	// Fields are the fields the GPU query asked for: GPUQueryFields, or
	// LegacyGPUQueryFields on a driver before 510.
	Fields []string
	// GPUs is the answer to --query-gpu with Fields.
	GPUs string
	// Apps is the answer to --query-compute-apps with AppQueryFields;
	// AppsErr is why there is none.
	Apps    string
	AppsErr error
	// Banner is plain nvidia-smi's output; BannerErr is why there is none.
	Banner    string
	BannerErr error
}

// NVIDIAInventory reads nvidia-smi's answers into an inventory. Only the GPU
// query is needed: a failed process query or banner is a warning, and a
// driver that knows no compute_cap gets it from the card table. It fails
// when the GPU query holds no readable row.
func NVIDIAInventory(a NVIDIAAnswers) (Inventory, error) {
	inv := Inventory{Tool: "nvidia-smi"}
	if !slices.Contains(a.Fields, "compute_cap") {
		// Drivers before 510 know neither compute_cap nor, on some, MIG.
		inv.Warnings = append(inv.Warnings, "this driver reports neither compute capability nor MIG mode: compute capability comes from the GPU table, MIG is taken as off")
	}
	devs, driver, warns := ParseGPUQuery(a.GPUs, a.Fields)
	inv.Warnings = append(inv.Warnings, warns...)
	if len(devs) == 0 {
		return inv, fmt.Errorf("nvidia-smi printed no readable GPU row: %q", clip(strings.TrimSpace(a.GPUs)))
	}
	fillComputeCapability(devs)
	inv.GPUs, inv.Driver = devs, driver

	var apps []Process
	if a.AppsErr != nil {
		inv.Warnings = append(inv.Warnings, fmt.Sprintf("compute process query failed: %v", a.AppsErr))
	} else {
		var w []string
		apps, w = ParseAppQuery(a.Apps, devs)
		inv.Warnings = append(inv.Warnings, w...)
	}
	var banner Banner
	if a.BannerErr != nil {
		inv.Warnings = append(inv.Warnings, fmt.Sprintf("plain nvidia-smi (for the CUDA version and graphics processes) failed: %v", a.BannerErr))
	} else {
		banner = ParseBanner(a.Banner)
	}
	inv.CUDA = banner.CUDA
	if inv.Driver == "" {
		inv.Driver = banner.Driver
	}
	inv.Processes = mergeProcesses(banner.Processes, apps, devs)
	return inv, nil
}

// fillComputeCapability takes a device's compute capability from its card
// when the tool did not report one.
func fillComputeCapability(devs []Device) {
	for i := range devs {
		if devs[i].ComputeCapability == "" && devs[i].Card != nil {
			devs[i].ComputeCapability = devs[i].Card.ComputeCapability
		}
	}
}

func clip(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

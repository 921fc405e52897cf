package gpu

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// ROCmArgs are the arguments the real probe gives rocm-smi.
var ROCmArgs = []string{"--showmeminfo", "vram", "--showproductname", "--json"}

// ParseROCmSMI parses `rocm-smi --showmeminfo vram --showproductname --json`:
// an object keyed "card0", "card1", … whose values carry "VRAM Total Memory
// (B)", "VRAM Total Used Memory (B)" and a product name ("Card series",
// "Card Series" or "Device Name", depending on the ROCm version), plus a
// "system" object with the driver version. Memory is in bytes there and
// converted to MiB (rounded down) here. An MI250/MI250X lists each of its two
// GCDs as a card.
func ParseROCmSMI(out []byte) (devs []Device, driver string, warnings []string, err error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(out, &top); err != nil {
		return nil, "", nil, fmt.Errorf("rocm-smi output is not a JSON object: %w", err)
	}
	var keys []string
	for k := range top {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		var fields map[string]any
		if err := json.Unmarshal(top[k], &fields); err != nil {
			warnings = append(warnings, fmt.Sprintf("rocm-smi %q is not an object", k))
			continue
		}
		if strings.EqualFold(k, "system") {
			driver = stringField(fields, "driver version")
			continue
		}
		n, ok := strings.CutPrefix(strings.ToLower(k), "card")
		idx, err := strconv.Atoi(n)
		if !ok || err != nil || idx < 0 {
			warnings = append(warnings, fmt.Sprintf("rocm-smi key %q is not cardN; skipped", k))
			continue
		}
		d := Device{Index: idx, TotalMiB: Unknown, UsedMiB: Unknown, FreeMiB: Unknown}
		for _, f := range []string{"card series", "device name", "card model"} {
			if d.Name = stringField(fields, f); d.Name != "" {
				break
			}
		}
		if d.Name == "" {
			warnings = append(warnings, fmt.Sprintf("rocm-smi %s has no product name", k))
			d.Name = "AMD GPU " + k
		}
		d.UUID = stringField(fields, "unique id")
		d.ComputeCapability = stringField(fields, "gfx version")
		if d.TotalMiB, err = bytesFieldMiB(fields, "vram total memory (b)"); err != nil {
			warnings = append(warnings, fmt.Sprintf("rocm-smi %s: %v", k, err))
		}
		if d.UsedMiB, err = bytesFieldMiB(fields, "vram total used memory (b)"); err != nil {
			warnings = append(warnings, fmt.Sprintf("rocm-smi %s: %v", k, err))
		}
		if d.TotalMiB >= 0 && d.UsedMiB >= 0 && d.UsedMiB <= d.TotalMiB {
			d.FreeMiB = d.TotalMiB - d.UsedMiB
		}
		devs = append(devs, d)
	}
	sort.SliceStable(devs, func(a, b int) bool { return devs[a].Index < devs[b].Index })
	matchCards(devs)
	return devs, driver, warnings, nil
}

// stringField finds a key case-insensitively and returns its string value.
// ROCmInventory reads rocm-smi's answer to ROCmArgs into an inventory, with
// compute capabilities from the card table. An answer listing no card is an
// inventory without GPUs, not an error; a malformed one is an error.
func ROCmInventory(out []byte) (Inventory, error) {
	inv := Inventory{Tool: "rocm-smi"}
	devs, driver, warns, err := ParseROCmSMI(out)
	if err != nil {
		return inv, err
	}
	fillComputeCapability(devs)
	inv.GPUs, inv.Driver, inv.Warnings = devs, driver, warns
	return inv, nil
}

func stringField(fields map[string]any, key string) string {
	for k, v := range fields {
		if strings.EqualFold(strings.TrimSpace(k), key) {
			if s, ok := v.(string); ok && !notAvailable(s) {
				return strings.TrimSpace(s)
			}
		}
	}
	return ""
}

func bytesFieldMiB(fields map[string]any, key string) (int64, error) {
	s := stringField(fields, key)
	if s == "" {
		return Unknown, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return Unknown, fmt.Errorf("%s %q is not a number of bytes", key, s)
	}
	return n / MiB, nil
}

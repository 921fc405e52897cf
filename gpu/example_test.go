package gpu_test

import (
	"fmt"

	"github.com/canifinetune/canifinetune/gpu"
)

// Resolve what a user typed after --gpu.
func ExampleLookup() {
	c, err := gpu.Lookup("rtx-4090")
	if err != nil {
		panic(err)
	}
	fmt.Println(c.Name, c.MemoryMiB, c.MemoryBytes())
	_, err = gpu.Lookup("v100")
	fmt.Println(err)
	// Output:
	// NVIDIA GeForce RTX 4090 24564 25757220864
	// ambiguous GPU name "v100": it could be "Tesla V100-SXM2-16GB" (v100-16gb) or "Tesla V100-SXM2-32GB" (v100-32gb); name one of them
}

// One --gpus flag takes detected indices or a card list.
func ExampleParseGPUList() {
	for _, arg := range []string{"0,2", "2xH100,1x4090"} {
		if gpu.LooksLikeIndexList(arg) {
			ids, _ := gpu.ParseIndexList(arg)
			fmt.Println("indices", ids)
			continue
		}
		specs, _ := gpu.ParseGPUList(arg)
		for _, s := range specs {
			fmt.Println(s.Count, "x", s.Card.Name)
		}
	}
	// Output:
	// indices [0 2]
	// 2 x NVIDIA H100 80GB HBM3
	// 1 x NVIDIA GeForce RTX 4090
}

// --gpu auto on a multi-GPU host: detect, then place a 100 GiB plan (seed 001).
func ExampleSelectGPUs() {
	// The devices a probe (package gpu/probe) found.
	inv := gpu.Inventory{GPUs: []gpu.Device{
		{Index: 0, Name: "NVIDIA A100-SXM4-80GB", TotalMiB: 81920, FreeMiB: 2726},
		{Index: 1, Name: "NVIDIA A100-SXM4-80GB", TotalMiB: 81920, FreeMiB: 81036},
		{Index: 2, Name: "NVIDIA A100-SXM4-80GB", TotalMiB: 81920, FreeMiB: 60552},
	}}
	sel, err := gpu.SelectGPUs(100*gpu.GiB, inv.GPUs)
	if err != nil {
		panic(err)
	}
	fmt.Println(sel.Indices(), sel.DeviceMap, sel.Fits)
	fmt.Printf("usable %.2f GiB\n", float64(sel.UsableBytes)/float64(gpu.GiB))
	for _, l := range sel.LeftOut {
		fmt.Println("left out", l.Index, l.Reason)
	}
	// Output:
	// [1 2] balanced true
	// usable 129.40 GiB
	// left out 0 not needed: GPUs 1,2, with more free memory, already cover the 100.00 GiB required
}

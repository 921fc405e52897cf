package trace

import (
	"bytes"
	"cmp"
	"slices"
)

// A kernel's name does not always say what it is for: the optimizer's
// arithmetic runs in the same ATen elementwise kernels as the model's, and
// a collective may launch plain copies. Kineto gives every kernel the
// "External id" of the innermost host op (cpu_op or user_annotation) that
// launched it, and writes host ops before GPU ops, so one pass can note
// what the host ops say and apply it to the kernels read later:
//
//   - aten::_fused_adam*/_fused_sgd/_fused_adagrad and aten::_foreach_* ops,
//     and any host op inside an Optimizer.step#… span on the same thread
//     (torch.optim records one around every step), give optimizer;
//   - nccl:*, c10d::* and record_param_comms give communication.
//
// The hint only moves a kernel out of elementwise, reduction_norm or other:
// a GEMM launched under an optimizer op stays a GEMM, an NCCL kernel stays
// communication. A hinted kernel gets its own row in the kernel table, so
// the same name can appear under two categories (the model's multiply and
// the optimizer's).
//
// Memory: one entry per hinted host op, at most maxHints; past that, hints
// are counted in the host_hints_dropped flag and the kernels fall back to
// their names. Host ops without a hint cost nothing.
type hostHints struct {
	hints        map[int64]Category // External id → hint
	optSpans     map[threadKey][2]int64
	hintsDropped int64
	hintNameCat  map[string]Category // name categories of hinted kernels
	// Traces of PyTorch 1.8–1.9 write each host op when it ends, so an
	// Optimizer.step#… span comes after the ops inside it. External ids
	// count up in order of start on all threads, so the ops inside a span
	// written late are those of its thread with an id above the span's, up
	// to the largest id the thread had when the span came: optRanges holds
	// these (low, high] id ranges, sorted, and threadMaxExt each thread's
	// largest id so far.
	optRanges    [][2]int64
	threadMaxExt map[threadKey]int64
}

// maxHints bounds the host ops remembered for their hint (about 30 bytes
// each in the map).
const maxHints = 1 << 16

// maxOptRanges bounds the optimizer steps whose span came after the ops
// inside it (one range each; a trace holds a few steps). Kept small, an
// insertion out of order costs little however a trace orders them.
const maxOptRanges = 1 << 12

const optimizerStepPrefix = "Optimizer.step#"

var (
	optimizerOpPrefixes = [][]byte{[]byte("aten::_fused_adam"), []byte("aten::_fused_sgd"),
		[]byte("aten::_fused_adagrad"), []byte("aten::_foreach_"), []byte(optimizerStepPrefix)}
	commOpPrefixes = [][]byte{[]byte("nccl:"), []byte("c10d::"), []byte("record_param_comms")}
)

// hostOpHint is the category a host op's name gives the kernels it
// launches, or CatOther for none.
func hostOpHint(name []byte) Category {
	for _, p := range optimizerOpPrefixes {
		if bytes.HasPrefix(name, p) {
			return CatOptimizer
		}
	}
	for _, p := range commOpPrefixes {
		if bytes.HasPrefix(name, p) {
			return CatCommunication
		}
	}
	return CatOther
}

// noteHostOp remembers the hint of one cpu_op or user_annotation.
func (t *Trace) noteHostOp(e *event) {
	k := threadKey{e.pid, e.tid}
	if bytes.HasPrefix(e.name, []byte(optimizerStepPrefix)) {
		if t.optSpans == nil {
			t.optSpans = map[threadKey][2]int64{}
		}
		t.optSpans[k] = [2]int64{e.ts, e.ts + e.dur}
		if m, ok := t.threadMaxExt[k]; ok && e.extOK && m > e.ext {
			t.addOptRange(e.ext, m)
		}
	}
	if !e.extOK {
		return
	}
	if t.threadMaxExt == nil {
		t.threadMaxExt = map[threadKey]int64{}
	}
	if m, ok := t.threadMaxExt[k]; !ok || e.ext > m {
		t.threadMaxExt[k] = e.ext
	}
	h := hostOpHint(e.name)
	if h == CatOther && len(t.optSpans) > 0 {
		if sp, ok := t.optSpans[k]; ok && e.ts >= sp[0] && e.ts < sp[1] {
			h = CatOptimizer
		}
	}
	if h == CatOther {
		return
	}
	if t.hints == nil {
		t.hints = map[int64]Category{}
	}
	if _, ok := t.hints[e.ext]; !ok && len(t.hints) >= maxHints {
		t.hintsDropped++
		return
	}
	t.hints[e.ext] = h
}

// addOptRange notes that the host ops with External ids in (lo, hi] ran
// inside an optimizer step, keeping optRanges sorted by lo.
func (t *Trace) addOptRange(lo, hi int64) {
	if len(t.optRanges) >= maxOptRanges {
		t.hintsDropped++
		return
	}
	i, _ := slices.BinarySearchFunc(t.optRanges, lo, func(r [2]int64, lo int64) int { return cmp.Compare(r[0], lo) })
	t.optRanges = slices.Insert(t.optRanges, i, [2]int64{lo, hi})
}

// hintFor is the hint for a GPU op, if its launching host op gave one.
func (t *Trace) hintFor(e *event, kind OpKind) (Category, bool) {
	if kind != KindKernel || !e.extOK {
		return 0, false
	}
	if h, ok := t.hints[e.ext]; ok {
		return h, true
	}
	// The last range starting below the id is the innermost candidate;
	// ranges of successive steps do not overlap.
	i, _ := slices.BinarySearchFunc(t.optRanges, e.ext, func(r [2]int64, x int64) int { return cmp.Compare(r[0], x) })
	if i > 0 && e.ext <= t.optRanges[i-1][1] {
		return CatOptimizer, true
	}
	return 0, false
}

// internHinted interns a kernel name launched under hint h. When the hint
// changes its category, the name gets an entry of its own with the hinted
// category forced, beside the entry of the same name launched elsewhere.
func (t *Trace) internHinted(b []byte, h Category) int32 {
	c, ok := t.hintNameCat[string(b)]
	if !ok {
		c = Categorize(KindKernel, string(b))
		if t.hintNameCat == nil {
			t.hintNameCat = map[string]Category{}
		}
		if len(t.hintNameCat) < maxNames {
			t.hintNameCat[string(b)] = c
		}
	}
	if c != CatElementwise && c != CatReduction && c != CatOther {
		return t.internCapped(b, true, KindKernel)
	}
	key := string(b) + "\x00" + h.String()
	if i, ok := t.names[key]; ok {
		return i
	}
	if t.forcedCat == nil {
		t.forcedCat = map[int32]Category{}
	}
	if len(t.Names) < maxNames && t.nameBytes+int64(len(b)) <= maxNameBytes {
		i := int32(len(t.Names))
		t.Names = append(t.Names, string(b))
		t.names[key] = i
		t.nameBytes += int64(len(b))
		t.forcedCat[i] = h
		return i
	}
	t.namesMerged++
	i := t.intern([]byte(OtherNames + ": " + h.String() + ")"))
	t.forcedCat[i] = h
	return i
}

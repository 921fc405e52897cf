package trace

import (
	"cmp"
	"encoding/binary"
)

// The fixed-size records the analysis sorts, and their encodings in
// scratch runs. Sizes are exact (no padding): they are what a spilled op
// costs on disk and what bounds a run in memory.

var le = binary.LittleEndian

func putBool(b []byte, v bool) {
	b[0] = 0
	if v {
		b[0] = 1
	}
}

// opCodec: an Op in 31 bytes.
var opCodec = codec[Op]{size: 31,
	put: func(b []byte, o *Op) {
		le.PutUint64(b[0:], uint64(o.Start))
		le.PutUint64(b[8:], uint64(o.Dur))
		le.PutUint32(b[16:], o.Corr)
		le.PutUint32(b[20:], uint32(o.Name))
		le.PutUint32(b[24:], uint32(o.Stream))
		le.PutUint16(b[28:], uint16(o.Device))
		b[30] = byte(o.Kind)
	},
	get: func(b []byte, o *Op) {
		o.Start = int64(le.Uint64(b[0:]))
		o.Dur = int64(le.Uint64(b[8:]))
		o.Corr = le.Uint32(b[16:])
		o.Name = int32(le.Uint32(b[20:]))
		o.Stream = int32(le.Uint32(b[24:]))
		o.Device = int16(le.Uint16(b[28:]))
		o.Kind = OpKind(b[30])
	},
}

// launchCodec: a Launch in 25 bytes.
var launchCodec = codec[Launch]{size: 25,
	put: func(b []byte, l *Launch) {
		le.PutUint64(b[0:], uint64(l.Start))
		le.PutUint64(b[8:], uint64(l.End))
		le.PutUint32(b[16:], l.Corr)
		le.PutUint32(b[20:], uint32(l.Thread))
		putBool(b[24:], l.Kernel)
	},
	get: func(b []byte, l *Launch) {
		l.Start = int64(le.Uint64(b[0:]))
		l.End = int64(le.Uint64(b[8:]))
		l.Corr = le.Uint32(b[16:])
		l.Thread = int32(le.Uint32(b[20:]))
		l.Kernel = b[24] != 0
	},
}

// labelCodec: a Label in 27 bytes.
var labelCodec = codec[Label]{size: 27,
	put: func(b []byte, l *Label) {
		le.PutUint64(b[0:], uint64(l.Start))
		le.PutUint64(b[8:], uint64(l.End))
		le.PutUint32(b[16:], uint32(l.Name))
		le.PutUint32(b[20:], uint32(l.Track))
		le.PutUint16(b[24:], uint16(l.Device))
		b[26] = 0
		if l.GPU {
			b[26] = 1
		} else if l.Module {
			b[26] = 2
		}
	},
	get: func(b []byte, l *Label) {
		l.Start = int64(le.Uint64(b[0:]))
		l.End = int64(le.Uint64(b[8:]))
		l.Name = int32(le.Uint32(b[16:]))
		l.Track = int32(le.Uint32(b[20:]))
		l.Device = int16(le.Uint16(b[24:]))
		l.GPU = b[26] == 1
		l.Module = b[26] == 2
	},
}

// jop is a GPU op joined to its launch and tagged with its step: all the
// sweep and the tables after it need to know about one op.
type jop struct {
	Op
	LStart, LEnd int64 // the launch call, when HasLaunch
	Thread       int32 // the launching host thread, when HasLaunch
	Step         int32 // index into the sorted steps, -1 if none
	HasLaunch    bool
}

// launchPoint is when the host launched the op, or its GPU start without a launch.
func (j *jop) launchPoint() int64 {
	if j.HasLaunch {
		return j.LStart
	}
	return j.Start
}

// jopCodec: a jop in 56 bytes.
var jopCodec = codec[jop]{size: 56,
	put: func(b []byte, j *jop) {
		opCodec.put(b, &j.Op)
		le.PutUint64(b[31:], uint64(j.LStart))
		le.PutUint64(b[39:], uint64(j.LEnd))
		le.PutUint32(b[47:], uint32(j.Thread))
		le.PutUint32(b[51:], uint32(j.Step))
		putBool(b[55:], j.HasLaunch)
	},
	get: func(b []byte, j *jop) {
		opCodec.get(b, &j.Op)
		j.LStart = int64(le.Uint64(b[31:]))
		j.LEnd = int64(le.Uint64(b[39:]))
		j.Thread = int32(le.Uint32(b[47:]))
		j.Step = int32(le.Uint32(b[51:]))
		j.HasLaunch = b[55] != 0
	},
}

// point is one op's exclusive time to attribute to a label: on track (a
// stream or a host thread) at time At.
type point struct {
	At, Excl int64
	Seq      int64 // the op's position in the device's time order
	Track    int32
	Typical  bool // the op belongs to a typical step
}

// pointCodec: a point in 29 bytes.
var pointCodec = codec[point]{size: 29,
	put: func(b []byte, p *point) {
		le.PutUint64(b[0:], uint64(p.At))
		le.PutUint64(b[8:], uint64(p.Excl))
		le.PutUint64(b[16:], uint64(p.Seq))
		le.PutUint32(b[24:], uint32(p.Track))
		putBool(b[28:], p.Typical)
	},
	get: func(b []byte, p *point) {
		p.At = int64(le.Uint64(b[0:]))
		p.Excl = int64(le.Uint64(b[8:]))
		p.Seq = int64(le.Uint64(b[16:]))
		p.Track = int32(le.Uint32(b[24:]))
		p.Typical = b[28] != 0
	},
}

// gapRec is one idle gap's length and the step of the op that ends it.
type gapRec struct {
	Len  int64
	Step int32
}

// gapCodec: a gapRec in 12 bytes.
var gapCodec = codec[gapRec]{size: 12,
	put: func(b []byte, g *gapRec) {
		le.PutUint64(b[0:], uint64(g.Len))
		le.PutUint32(b[8:], uint32(g.Step))
	},
	get: func(b []byte, g *gapRec) {
		g.Len = int64(le.Uint64(b[0:]))
		g.Step = int32(le.Uint32(b[8:]))
	},
}

// Orders. Only the join and the time order need full tie-breaks (they
// decide which launch an op gets and which op owns an overlapped
// nanosecond); the others sort records whose order among equals does not
// change any figure.

func opByCorr(a, b Op) int { return cmp.Compare(a.Corr, b.Corr) }

func launchByCorr(a, b Launch) int {
	if c := cmp.Compare(a.Corr, b.Corr); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Start, b.Start); c != 0 {
		return c
	}
	if c := cmp.Compare(a.End, b.End); c != 0 {
		return c
	}
	return cmp.Compare(a.Thread, b.Thread)
}

// labelByTrack orders labels by device (GPU labels), track, then start.
func labelByTrack(a, b Label) int {
	if c := cmp.Compare(a.Device, b.Device); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Track, b.Track); c != 0 {
		return c
	}
	return cmp.Compare(a.Start, b.Start)
}

func pointByTrack(a, b point) int {
	if c := cmp.Compare(a.Track, b.Track); c != 0 {
		return c
	}
	return cmp.Compare(a.At, b.At)
}

func gapByLen(a, b gapRec) int { return cmp.Compare(a.Len, b.Len) }

// jopByTime is the sweep's order: device, start, stream, end, then the
// name (by its rank in string order), kind and correlation id. Full
// tie-breaks make the exclusive attribution independent of the order
// events happen to have in the file.
func jopByTime(rank []int32) func(a, b jop) int {
	return func(a, b jop) int {
		if c := cmp.Compare(a.Device, b.Device); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Start, b.Start); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Stream, b.Stream); c != 0 {
			return c
		}
		if c := cmp.Compare(a.End(), b.End()); c != 0 {
			return c
		}
		if c := cmp.Compare(rank[a.Name], rank[b.Name]); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return cmp.Compare(a.Corr, b.Corr)
	}
}

// hostOpRec is a host op (cpu_op or user_annotation) by its External id.
type hostOpRec struct {
	Ext  int64
	Name int32 // index into Trace.hostNames
}

// hostOpCodec: a hostOpRec in 12 bytes.
var hostOpCodec = codec[hostOpRec]{size: 12,
	put: func(b []byte, h *hostOpRec) {
		le.PutUint64(b[0:], uint64(h.Ext))
		le.PutUint32(b[8:], uint32(h.Name))
	},
	get: func(b []byte, h *hostOpRec) {
		h.Ext = int64(le.Uint64(b[0:]))
		h.Name = int32(le.Uint32(b[8:]))
	},
}

func hostOpByExt(a, b hostOpRec) int {
	return cmp.Or(cmp.Compare(a.Ext, b.Ext), cmp.Compare(a.Name, b.Name))
}

// opExt is a GPU op's duration by the External id of its launching host op.
type opExt struct {
	Ext    int64 // noExt when the op has none
	Dur    int64
	Device int16
}

// opExtCodec: an opExt in 18 bytes.
var opExtCodec = codec[opExt]{size: 18,
	put: func(b []byte, o *opExt) {
		le.PutUint64(b[0:], uint64(o.Ext))
		le.PutUint64(b[8:], uint64(o.Dur))
		le.PutUint16(b[16:], uint16(o.Device))
	},
	get: func(b []byte, o *opExt) {
		o.Ext = int64(le.Uint64(b[0:]))
		o.Dur = int64(le.Uint64(b[8:]))
		o.Device = int16(le.Uint16(b[16:]))
	},
}

func opExtByExt(a, b opExt) int { return cmp.Compare(a.Ext, b.Ext) }

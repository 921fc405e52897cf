package trace

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// NoHostOp is the host-op row of GPU ops whose External id no host op in
// the trace has (or that have none).
const NoHostOp = "(no host op)"

// hostOpAcc accumulates one host op name's GPU ops on one device.
type hostOpAcc struct {
	ops int
	sum int64
}

// joinHostOps reads the GPU ops' External ids and the host ops, both
// sorted by External id, and sums each GPU op's duration under the name of
// the host op with its id (the innermost cpu_op or user_annotation that
// launched it, as Kineto records it), per device. Of several host ops with
// one id, the first in name order is used. Both sorts are released.
func (t *Trace) joinHostOps(hs *sorter[hostOpRec], xs *sorter[opExt]) (_ map[int16]map[int32]*hostOpAcc, err error) {
	hostSorted, err := hs.finish()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, hostSorted.close()) }()
	extSorted, err := xs.finish()
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, extSorted.close()) }()
	none := int32(-1)
	out := map[int16]map[int32]*hostOpAcc{}
	hp := newPeeker(hostSorted.iter())
	it := extSorted.iter()
	var x opExt
	for it.next(&x) {
		name := none
		if x.Ext != noExt {
			for hp.ok && hp.cur.Ext < x.Ext {
				hp.advance()
			}
			if hp.ok && hp.cur.Ext == x.Ext {
				name = hp.cur.Name
			}
		}
		byName := out[x.Device]
		if byName == nil {
			byName = map[int32]*hostOpAcc{}
			out[x.Device] = byName
		}
		a := byName[name]
		if a == nil {
			a = &hostOpAcc{}
			byName[name] = a
		}
		a.ops++
		if x.Dur > 0 {
			a.sum += x.Dur
		}
	}
	if err := errors.Join(it.err, hp.it.err); err != nil {
		return nil, fmt.Errorf("read host ops: %w", err)
	}
	return out, nil
}

// hostOpRows are one device's host-op rows, by self GPU time descending.
func hostOpRows(names []string, byName map[int32]*hostOpAcc, sumDur int64) []HostOpRow {
	rows := []HostOpRow{}
	for n, a := range byName {
		name := NoHostOp
		if n >= 0 {
			name = names[n]
		}
		rows = append(rows, HostOpRow{Name: name, GPUOps: a.ops, SelfGPUNS: a.sum, Share: traceShare(a.sum, sumDur)})
	}
	slices.SortFunc(rows, func(x, y HostOpRow) int {
		return cmp.Or(cmp.Compare(y.SelfGPUNS, x.SelfGPUNS), cmp.Compare(x.Name, y.Name))
	})
	return rows
}

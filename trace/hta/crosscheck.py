#!/usr/bin/env python3
"""Runs HolisticTraceAnalysis (HTA) on Kineto traces and prints its figures as JSON.

Usage: crosscheck.py TRACE [TRACE ...]   (absolute or relative paths; .json or .json.gz)

For each trace it runs HTA's temporal breakdown, GPU kernel breakdown (by kernel
type and per kernel name) and idle time breakdown, twice:

  "same_ops": HTA's parser and HTA's analyses, on the op set canifinetune uses
      (every event of category kernel, gpu_memcpy or gpu_memset), in integer
      nanoseconds. Three things differ from a plain `TraceAnalysis(...)`, each
      to make the definitions equal so the figures can be compared exactly:
        1. HTA_DISABLE_NS_ROUNDING=1: HTA otherwise rounds a float start up and
           a float end down to whole µs;
        2. the parsed ts/dur (µs, float64) are converted to integer ns
           (round(µs × 1000)), so no analysis truncates to whole µs (the kernel
           type breakdown casts its region lengths to int) and
           consecutive_kernel_delay=30 means 30 ns, as HTA's docstring says;
        3. HTA's last-step filter is skipped and only GPU ops are kept (HTA by
           default drops every GPU op not launched before the last
           ProfilerStep began, and it would count cuda_sync and
           gpu_user_annotation events that carry a stream as kernels).
  "default": `TraceAnalysis(trace_files=...)` as a user runs it, with its
      default arguments (consecutive_kernel_delay=30 in the trace's µs). Every
      figure is converted to ns (× 1000) for comparison; they are whole µs.

Output (stdout): {"hta_version", "pandas_version", "traces": [{"file", "same_ops",
"default"}]} where each mode holds "gpu_events" (events by category that HTA's
analyses take as GPU ops), "temporal", "kernel_types", "kernels" and "idle", and
"same_ops" also "idle_30us" (the idle breakdown with consecutive_kernel_delay
30,000 ns: the threshold the default mode applies, on the same ops),
"first_ts_us" (the earliest timestamp as HTA read it) and "ts_integer" (HTA
read every timestamp as an integer, so exactly).
HTA's log goes to stderr. No figure is computed here: only HTA's output is
reshaped. Needs the environment of trace/hta/requirements.lock.
"""

import json
import math
import os
import sys

# HTA reads this when it parses; it must be set before a "same_ops" parse and
# unset for a "default" one, so it is set per call below.
_NS_ROUNDING_ENV = "HTA_DISABLE_NS_ROUNDING"

GPU_OP_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _num(x):
    """A JSON-safe number: ints stay ints, NaN becomes None."""
    if x is None:
        return None
    f = float(x)
    if math.isnan(f):
        return None
    if f.is_integer() and abs(f) < 2**53:
        return int(f)
    return f


def _figures(t, scale):
    """HTA's three breakdowns on the loaded Trace t; times × scale → ns."""
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis as BA

    sym = t.symbol_table.get_sym_table()
    df = t.get_trace(0)
    gpu = df[df["stream"].ne(-1)]
    cats = gpu["cat"].map(lambda c: sym[c]).value_counts()

    temporal = BA.get_temporal_breakdown(t, visualize=False).iloc[0]
    temporal_out = {
        "kernel_time_ns": _num(temporal["kernel_time(us)"] * scale),
        "idle_time_ns": _num(temporal["idle_time(us)"] * scale),
        "compute_time_ns": _num(temporal["compute_time(us)"] * scale),
        "non_compute_time_ns": _num(temporal["non_compute_time(us)"] * scale),
    }

    # duration_ratio=1.0 and an unbounded num_kernels: no name is merged
    # into "others", so every kernel name gets its own row.
    kt, kk = BA.get_gpu_kernel_breakdown(
        t,
        visualize=False,
        include_memory_kernels=True,
        num_kernels=1 << 62,
        duration_ratio=1.0,
    )
    kernel_types = {r["kernel_type"]: _num(r["sum"] * scale) for _, r in kt.iterrows()}
    kernels = [
        {
            "name": r["name"],
            "kernel_type": r["kernel_type"],
            "sum_ns": _num(r["sum (us)"] * scale),
            "max_ns": _num(r["max (us)"] * scale),
            "min_ns": _num(r["min (us)"] * scale),
            "mean_ns": _num(r["mean (us)"] * scale),
            "std_ns": _num(r["stddev"] * scale),
        }
        for _, r in kk.iterrows()
    ]

    out = {
        "gpu_events": {k: int(v) for k, v in cats.items()},
        "temporal": temporal_out,
        "kernel_types": kernel_types,
        "kernels": kernels,
        "idle": _idle(t, 30, scale),
    }
    if scale == 1:
        # Same ops, in ns: HTA's default threshold as it acts on a trace
        # in µs (30 µs), so the default mode's split can be told apart from
        # its op filter and rounding.
        out["idle_30us"] = _idle(t, 30_000, scale)
    return out


def _idle(t, consecutive_kernel_delay, scale):
    """HTA's idle time breakdown per stream; times × scale → ns."""
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis as BA

    idle_df, _ = BA.get_idle_time_breakdown(
        t,
        consecutive_kernel_delay=consecutive_kernel_delay,
        rank=0,
        visualize=False,
    )
    idle = {}
    for _, r in idle_df.iterrows():
        s = idle.setdefault(str(int(r["stream"])), {})
        s[r["idle_category"] + "_ns"] = _num(r["idle_time"] * scale)
    return idle


def same_ops(path):
    from hta.common.trace import Trace

    os.environ[_NS_ROUNDING_ENV] = "1"
    try:
        t = Trace(trace_files={0: path}, trace_dir=os.path.dirname(path))
        t.parse_traces(use_multiprocessing=False, use_memory_profiling=False)
    finally:
        del os.environ[_NS_ROUNDING_ENV]
    # What load_traces does, less the last-step filter (see the docstring).
    t._align_all_ranks()
    df = t.traces[0]
    sym_id = t.symbol_table.get_sym_id_map()
    op_cats = [sym_id[c] for c in GPU_OP_CATS if c in sym_id]
    keep = df["stream"].eq(-1) | df["cat"].isin(op_cats)
    # A non-op with a stream (cuda_sync, gpu_user_annotation) is neither an op
    # nor a host event: drop it.
    keep &= ~(df["stream"].ne(-1) & ~df["cat"].isin(op_cats))
    df = df[keep].copy()
    # Whole-µs timestamps arrive as int64, exact: keep them so (absolute
    # epoch µs exceed what float64 holds to the ns).
    ts_integer = df["ts"].dtype.kind == "i"
    if ts_integer:
        df["ts"] = df["ts"].astype("int64") * 1000
    else:
        df["ts"] = (df["ts"].astype("float64") * 1000).round().astype("int64")
    df["dur"] = (df["dur"].astype("float64") * 1000).round()
    df["end"] = df["ts"] + df["dur"]
    df = df.set_index("index", drop=False)
    df.index.names = [None]
    t.traces[0] = df
    t.is_parsed = True
    out = _figures(t, 1)
    # The earliest timestamp as HTA read it (µs, float64): how far from zero
    # the trace's clock is says how much precision float64 left it.
    out["first_ts_us"] = float(t.min_ts)
    out["ts_integer"] = bool(ts_integer)
    return out


def default(path):
    from hta.trace_analysis import TraceAnalysis

    os.environ.pop(_NS_ROUNDING_ENV, None)
    ta = TraceAnalysis(trace_files={0: path}, trace_dir=os.path.dirname(path))
    return _figures(ta.t, 1000)


def main(argv):
    if len(argv) < 2:
        print("usage: crosscheck.py TRACE [TRACE ...]", file=sys.stderr)
        return 2
    import warnings
    from importlib.metadata import version

    import pandas

    # HTA 0.5.0 on pandas 2.3 warns about a deprecated downcast on every
    # kernel breakdown; the figures are unaffected.
    warnings.simplefilter("ignore", FutureWarning)

    out = {
        "hta_version": version("HolisticTraceAnalysis"),
        "pandas_version": pandas.__version__,
        "traces": [],
    }
    for p in argv[1:]:
        path = os.path.abspath(p)
        if not os.path.isfile(path):
            print(f"crosscheck.py: {p}: no such file", file=sys.stderr)
            return 1
        out["traces"].append(
            {"file": p, "same_ops": same_ops(path), "default": default(path)}
        )
    json.dump(out, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

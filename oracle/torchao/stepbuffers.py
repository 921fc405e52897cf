"""Reads the buffers Inductor allocates for torchao's compiled 8-bit AdamW step.

torchao's AdamW8bit steps each parameter with one torch.compile'd call of
single_param_adam, which computes in fp32 and writes the 8-bit states back.
The temporaries that call holds are the buffers its generated wrapper code
allocates (empty_strided_*) beyond its inputs. This script steps one bf16
parameter twice on CPU, captures the wrapper code Inductor writes, replays
its allocations and `del`s, and prints a JSON receipt: the peak bytes of
those buffers per element of the parameter, with the versions used.

Usage: python oracle/torchao/stepbuffers.py [ROWS COLS] > receipt.json
"""

import json
import logging
import platform
import re
import sys

import torch
import torchao

try:  # torchao >= 0.11
    from torchao.optim import AdamW8bit
except ImportError:  # the 2024 releases
    from torchao.prototype.low_bit_optim import AdamW8bit

ALLOC = re.compile(r"^\s*(buf\d+) = empty_strided_\w+\(\(([^)]*)\), \([^)]*\), torch\.(\w+)\)")
FREE = re.compile(r"^\s*del (buf\d+)")
# Inductor hands a dead buffer's storage to a new one in place:
# "buf3 = buf0; del buf0  # reuse" (or reinterpret_tensor(buf0, ...)).
REUSE = re.compile(r"^\s*(buf\d+) = .*\b(buf\d+)\b.*; del \2\s*# reuse")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "uint8": 1, "int8": 1, "int64": 8, "int32": 4, "bool": 1}


class Capture(logging.Handler):
    def __init__(self):
        super().__init__()
        self.codes = []

    def emit(self, record):
        msg = record.getMessage()
        if "def call(" in msg:
            self.codes.append(msg)
        elif "Output code written to:" in msg:
            # newer torch logs only the file's path
            with open(msg.split("Output code written to:", 1)[1].strip()) as f:
                self.codes.append(f.read())


def replay(code):
    """Peak bytes of the buffers the wrapper's call() holds at once."""
    live, peak, sizes, allocs = 0, 0, {}, []
    body = code[code.index("def call("):]
    for line in body.splitlines():
        m = ALLOC.match(line)
        if m:
            name, shape, dtype = m.group(1), m.group(2), m.group(3)
            n = 1
            for d in filter(None, (s.strip() for s in shape.split(","))):
                n *= int(d)
            sizes[name] = n * DTYPE_BYTES[dtype]
            allocs.append({"buffer": name, "shape": shape, "dtype": dtype})
            live += sizes[name]
            peak = max(peak, live)
            continue
        m = REUSE.match(line)
        if m and m.group(2) in sizes:
            sizes[m.group(1)] = sizes.pop(m.group(2))
            continue
        m = FREE.match(line)
        if m and m.group(1) in sizes:
            live -= sizes.pop(m.group(1))
        if line.strip().startswith("return"):
            break
    return peak, allocs


def main():
    rows, cols = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) == 3 else (1024, 4096)
    torch._logging.set_logs(output_code=True)
    cap = Capture()
    logging.getLogger("torch._inductor").addHandler(cap)
    logging.getLogger("torch._inductor.graph").addHandler(cap)
    logging.getLogger("torch._inductor.codecache").addHandler(cap)
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(rows, cols, dtype=torch.bfloat16))
    opt = AdamW8bit([p], lr=1e-3)
    for _ in range(2):
        p.grad = torch.randn_like(p)
        opt.step()
    if not cap.codes:
        sys.exit("stepbuffers: Inductor wrote no wrapper code (is output_code logging available?)")
    peak, allocs = replay(cap.codes[-1])
    numel = p.numel()
    state = opt.state[p]["exp_avg"]
    print(json.dumps({
        "what": "peak bytes of the temporaries Inductor's wrapper allocates for one compiled torchao AdamW8bit parameter step, per element of the parameter",
        "torch": torch.__version__,
        "torchao": torchao.__version__,
        "device": "cpu (Inductor C++ backend)",
        "python": platform.python_version(),
        "param": {"shape": [rows, cols], "dtype": "bfloat16", "numel": numel},
        "state_type": type(state).__name__,
        "buffers": allocs,
        "peak_bytes": peak,
        "peak_bytes_per_element": round(peak / numel, 4),
    }, indent=1))


if __name__ == "__main__":
    main()

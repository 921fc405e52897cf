"""A fake torch for probe_test.py (see ../README.md)."""

import contextlib
import os
import types

__version__ = "0.0+fake"
version = types.SimpleNamespace(cuda="12.4")


class dtype:
    def __init__(self, name, size):
        self.name, self.size = name, size

    def __repr__(self):
        return "torch." + self.name

    __str__ = __repr__


float32 = dtype("float32", 4)
bfloat16 = dtype("bfloat16", 2)
int64 = dtype("int64", 8)


class device:
    def __init__(self, type, index=None):
        self.type, self.index = type, index

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Tensor:
    def __init__(self, numel, dt=float32, requires_grad=False):
        self._numel, self.dtype, self.requires_grad = numel, dt, requires_grad
        cuda._alloc(numel * dt.size)

    def numel(self):
        return self._numel

    def element_size(self):
        return self.dtype.size

    def data_ptr(self):
        return id(self)

    def detach(self):
        return self

    def __float__(self):
        return 2.5

    def __truediv__(self, other):
        return self

    def backward(self):
        cuda._stage("backward", 3 << 20)


def is_tensor(x):
    return isinstance(x, Tensor)


class Generator:
    def __init__(self, device=None):
        pass

    def manual_seed(self, seed):
        return self


def randint(low, high, size, device=None, generator=None):
    return Tensor(size[0] * size[1], int64)


@contextlib.contextmanager
def autocast(device_type, dtype=None, enabled=True):
    yield


class OutOfMemoryError(RuntimeError):
    pass


class _Cuda:
    OutOfMemoryError = OutOfMemoryError
    TOTAL = 80 << 30

    def __init__(self):
        self.allocated = self.reserved = self.peak = self.peak_reserved = 0
        self.hits = {}

    def _alloc(self, n):
        self.allocated += n
        # The caching allocator reserves in 2 MiB blocks and does not give back.
        self.reserved = max(self.reserved, -(-self.allocated // (2 << 20)) * (2 << 20))
        self.peak = max(self.peak, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def _stage(self, stage, transient):
        self.hits[stage] = self.hits.get(stage, 0) + 1
        want = os.environ.get("FAKE_TORCH_OOM", "")
        if want == "%s:%d" % (stage, self.hits[stage]):
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (fake)")
        self._alloc(transient)
        self.allocated -= transient

    def is_available(self):
        return "FAKE_TORCH_NO_CUDA" not in os.environ

    def set_device(self, d):
        pass

    def get_device_properties(self, i):
        return types.SimpleNamespace(total_memory=self.TOTAL, major=9, minor=0)

    def get_device_name(self, i):
        return "Fake GPU"

    def mem_get_info(self, d=None):
        return self.TOTAL - self.reserved, self.TOTAL

    def synchronize(self, d=None):
        pass

    def memory_allocated(self, d=None):
        return self.allocated

    def memory_reserved(self, d=None):
        return self.reserved

    def max_memory_allocated(self, d=None):
        return self.peak

    def max_memory_reserved(self, d=None):
        return self.peak_reserved

    def memory_stats(self, d=None):
        return {"active_bytes.all.peak": self.peak}

    def reset_peak_memory_stats(self, d=None):
        self.peak, self.peak_reserved = self.allocated, self.reserved


cuda = _Cuda()


class _Optimizer:
    def __init__(self, params, lr=None, **kw):
        self.params, self.kw, self.state = list(params), kw, {}

    def step(self):
        cuda._stage("optimizer", 1 << 20)
        if not self.state:
            for p in self.params:
                self.state[p] = self._init_state(p)

    def zero_grad(self, set_to_none=True):
        pass


class AdamW(_Optimizer):
    def _init_state(self, p):
        return {"step": Tensor(1), "exp_avg": Tensor(p.numel(), p.dtype), "exp_avg_sq": Tensor(p.numel(), p.dtype)}


class SGD(_Optimizer):
    def _init_state(self, p):
        return {}


optim = types.SimpleNamespace(AdamW=AdamW, SGD=SGD)
AdamW.__module__ = SGD.__module__ = "torch.optim"

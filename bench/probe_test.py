"""Tests of the probe's pure helpers; they need Python 3 only, not torch.

Run: python3 -m unittest discover -s bench -p 'probe_test.py'
"""

import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe  # noqa: E402


def good_config(**over):
    cfg = {
        "model": "Qwen/Qwen2.5-0.5B", "method": "lora", "precision": "bf16-true",
        "optimizer": "adamw_torch", "attn": "sdpa", "seq_len": 512, "batch": 2,
        "updates": 3, "grad_accum": 1, "rank": 16, "alpha": 32, "targets": ["q_proj", "v_proj"],
        "quant": None, "device": 0,
    }
    cfg.update(over)
    return cfg


class ValidateConfigTest(unittest.TestCase):
    def test_good(self):
        self.assertEqual(probe.validate_config(good_config()), [])
        self.assertEqual(probe.validate_config(good_config(
            method="qlora", quant={"scheme": "nf4", "double_quant": True})), [])
        self.assertEqual(probe.validate_config(good_config(method="full", rank=None, targets=None)), [])

    def test_bad_values_name_field_and_value(self):
        cases = [
            (good_config(method="dora"), "method: bad value 'dora'"),
            (good_config(seq_len=0), "seq_len: bad value 0"),
            (good_config(batch=True), "batch: bad value True"),
            (good_config(rank=0), "rank: bad value 0"),
            (good_config(targets=[]), "targets: bad value []"),
            (good_config(optimizer="adam"), "optimizer: bad value 'adam'"),
            (good_config(method="qlora"), "quant: bad value None"),
            (good_config(method="qlora", quant={"scheme": "nf4"}, precision="fp32"), "precision: bad value 'fp32' for qlora"),
            (good_config(quant={"scheme": "nf4"}), "quant: bad value"),
            (good_config(device=-1), "device: bad value -1"),
            (good_config(model=""), "model: want"),
        ]
        for cfg, want in cases:
            got = probe.validate_config(cfg)
            self.assertTrue(any(want in p for p in got), "want %r in %r" % (want, got))

    def test_not_an_object(self):
        self.assertEqual(probe.validate_config([1]), ["config: want a JSON object, got list"])


class ClassifyTest(unittest.TestCase):
    def test_classify(self):
        cases = [
            ("OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB", "backward", "oom"),
            ("RuntimeError", "CUDA error: out of memory", "forward", "oom"),
            ("RuntimeError", "CUBLAS_STATUS_ALLOC_FAILED when calling cublasCreate", "forward", "oom"),
            ("RuntimeError", "expected scalar type Float but found BFloat16", "forward", "runtime_error"),
            ("ValueError", "Target modules {'foo'} not found in the base model", "load", "configuration_error"),
            ("ValueError", "shapes do not match", "backward", "runtime_error"),
            ("KeyboardInterrupt", "", "optimizer", "not_run"),
        ]
        for name, msg, stage, want in cases:
            self.assertEqual(probe.classify_exception(name, msg, stage), want, (name, msg, stage))


class SummaryTest(unittest.TestCase):
    def test_first_update_left_out_of_timing(self):
        ups = [
            {"step_s": 10.0, "tokens": 100, "peak_allocated_bytes": 5, "peak_reserved_bytes": 9},
            {"step_s": 1.0, "tokens": 100, "peak_allocated_bytes": 7, "peak_reserved_bytes": 8},
            {"step_s": 3.0, "tokens": 100, "peak_allocated_bytes": 6, "peak_reserved_bytes": 8},
        ]
        got = probe.summarize_updates(ups)
        self.assertEqual(got, {"mean_step_s": 2.0, "tokens_per_s": 50.0,
                               "peak_allocated_bytes": 7, "peak_reserved_bytes": 9})

    def test_unknown_stays_absent(self):
        self.assertEqual(probe.summarize_updates([]), {})
        got = probe.summarize_updates([{"step_s": 2.0, "tokens": 10, "peak_active_bytes": None}])
        self.assertNotIn("peak_active_bytes", got)
        self.assertEqual(got["tokens_per_s"], 5.0)

    def test_optimizer_states(self):
        got = probe.summarize_optimizer_states([("float32", 400), ("float32", 400), ("uint8", 100)])
        self.assertEqual(got, {"states": [{"dtype": "float32", "tensors": 2, "bytes": 800},
                                          {"dtype": "uint8", "tensors": 1, "bytes": 100}],
                               "state_bytes": 900})

    def test_finish_keeps_load_peak(self):
        r = probe.new_result()
        r["memory"]["peak_reserved_bytes"] = 100
        probe.finish_result(r, [{"step_s": 1.0, "tokens": 4, "peak_reserved_bytes": 50, "peak_allocated_bytes": 40}])
        self.assertEqual(r["memory"]["peak_reserved_bytes"], 100)
        self.assertEqual(r["memory"]["peak_allocated_bytes"], 40)
        self.assertEqual(r["completed_updates"], 1)


class VersionTest(unittest.TestCase):
    def test_dtype_kwarg(self):
        for v, want in [("4.55.2", "torch_dtype"), ("4.56.0.dev0", "dtype"), ("5.17.0", "dtype"),
                        ("4.9.1", "torch_dtype"), ("garbage", "torch_dtype")]:
            self.assertEqual(probe.dtype_kwarg(v), want, v)

    def test_version_tuple(self):
        self.assertEqual(probe.version_tuple("2.11.0+cu130"), (2, 11, 0))
        self.assertEqual(probe.version_tuple("4.56.0rc1"), (4, 56, 0))
        self.assertEqual(probe.version_tuple(""), ())


class ProtocolTest(unittest.TestCase):
    def test_write_result_file_and_last_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.json")
            buf = io.StringIO()
            probe.write_result(path, {"status": "oom", "stage": "backward"}, buf)
            with open(path) as f:
                self.assertEqual(json.load(f)["status"], "oom")
            last = buf.getvalue().strip().splitlines()[-1]
            self.assertTrue(last.startswith(probe.RESULT_PREFIX))
            self.assertEqual(json.loads(last[len(probe.RESULT_PREFIX):])["stage"], "backward")
            self.assertEqual(os.listdir(d), ["r.json"])

    def test_parse_args(self):
        self.assertEqual(probe.parse_args(["--config", "c", "--result", "r"]), ("c", "r"))
        with self.assertRaises(ValueError):
            probe.parse_args(["--bogus"])
        with self.assertRaises(ValueError):
            probe.parse_args([])


class WithoutTorchTest(unittest.TestCase):
    """Run the real probe with this Python; without torch it must report dependency_error."""

    def run_probe(self, cfg):
        with tempfile.TemporaryDirectory() as d:
            cpath, rpath = os.path.join(d, "c.json"), os.path.join(d, "r.json")
            with open(cpath, "w") as f:
                json.dump(cfg, f)
            here = os.path.dirname(os.path.abspath(__file__))
            p = subprocess.run([sys.executable, os.path.join(here, "probe.py"), "--config", cpath, "--result", rpath],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(rpath) as f:
                return json.load(f)

    def test_dependency_error(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch is installed here")
        except ImportError:
            pass
        r = self.run_probe(good_config())
        self.assertEqual(r["status"], "dependency_error")
        self.assertEqual(r["missing_module"], "torch")
        self.assertEqual(r["stage"], "setup")

    def test_configuration_error_before_imports(self):
        r = self.run_probe(good_config(method="dora"))
        self.assertEqual(r["status"], "configuration_error")
        self.assertIn("method", r["error"])


class FakeTorchTest(unittest.TestCase):
    """Drive the training path with the fake torch/transformers/peft in testdata/fakemods."""

    here = os.path.dirname(os.path.abspath(__file__))

    def run_probe(self, cfg, **env):
        with tempfile.TemporaryDirectory() as d:
            model = os.path.join(d, "model")
            os.mkdir(model)
            with open(os.path.join(model, "config.json"), "w") as f:
                json.dump({"model_type": "qwen2", "vocab_size": 1000}, f)
            cfg = dict(cfg, model=model, random_init=True)
            cpath, rpath = os.path.join(d, "c.json"), os.path.join(d, "r.json")
            with open(cpath, "w") as f:
                json.dump(cfg, f)
            e = dict(os.environ, PYTHONPATH=os.path.join(self.here, "testdata", "fakemods"), **env)
            for k in ("FAKE_TORCH_OOM", "FAKE_TORCH_NO_CUDA", "FAKE_TRANSFORMERS_VERSION"):
                if k not in env:
                    e.pop(k, None)
            p = subprocess.run([sys.executable, os.path.join(self.here, "probe.py"), "--config", cpath, "--result", rpath],
                               capture_output=True, text=True, timeout=60, env=e)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(rpath) as f:
                r = json.load(f)
            last = p.stdout.strip().splitlines()[-1]
            self.assertEqual(json.loads(last[len(probe.RESULT_PREFIX):]), r, "stdout's last line differs from the file")
            return r, p.stderr

    def test_lora_success(self):
        r, stderr = self.run_probe(good_config(updates=3))
        self.assertEqual(r["status"], "success", r.get("error"))
        self.assertEqual((r["stage"], r["completed_updates"], len(r["updates"])), ("done", 3, 3))
        self.assertEqual(r["effective"]["targets"], ["q_proj", "v_proj"])
        self.assertEqual(r["effective"]["trainable_dtypes"], ["float32"])
        self.assertEqual(r["effective"]["trainable_parameters"], 2 * 16 * 1024)
        self.assertEqual(r["gpu"]["name"], "Fake GPU")
        opt = r["optimizer"]
        self.assertEqual(opt["class"], "torch.optim.AdamW")
        # Two fp32 states per adapter; the scalar step is left out.
        self.assertEqual(opt["states"], [{"dtype": "float32", "tensors": 4, "bytes": 4 * 16 * 1024 * 4}])
        mem = r["memory"]
        for k in ("peak_allocated_bytes", "peak_reserved_bytes", "peak_active_bytes", "free_before_bytes", "free_after_bytes"):
            self.assertGreater(mem[k], 0, k)
        self.assertGreaterEqual(mem["peak_reserved_bytes"], mem["peak_allocated_bytes"])
        self.assertGreaterEqual(mem["peak_allocated_bytes"], max(u["peak_allocated_bytes"] for u in r["updates"]))
        self.assertIn("mean_step_s", r["timing"])
        self.assertIn("update 3/3", stderr)

    def test_full_bf16_true_with_old_transformers(self):
        r, _ = self.run_probe(good_config(method="full", rank=None, targets=None, grad_ckpt=True),
                              FAKE_TRANSFORMERS_VERSION="4.40.0")
        self.assertEqual(r["status"], "success", r.get("error"))
        self.assertEqual(r["effective"]["trainable_dtypes"], ["bfloat16"])
        self.assertTrue(r["effective"]["grad_ckpt"])
        self.assertEqual(r["optimizer"]["states"][0]["dtype"], "bfloat16")

    def test_all_linear_expanded(self):
        r, _ = self.run_probe(good_config(targets=["all-linear"]))
        self.assertEqual(len(r["effective"]["targets"]), 7)

    def test_oom_in_second_backward(self):
        r, _ = self.run_probe(good_config(updates=3), FAKE_TORCH_OOM="backward:2")
        self.assertEqual((r["status"], r["stage"], r["completed_updates"]), ("oom", "backward", 1))
        self.assertEqual(r["error_type"], "OutOfMemoryError")
        self.assertIn("at_failure_allocated_bytes", r["memory"])
        self.assertNotIn("optimizer", r)

    def test_oom_in_first_optimizer_step(self):
        r, _ = self.run_probe(good_config(), FAKE_TORCH_OOM="optimizer:1")
        self.assertEqual((r["status"], r["stage"], r["completed_updates"]), ("oom", "optimizer", 0))

    def test_no_cuda(self):
        r, _ = self.run_probe(good_config(), FAKE_TORCH_NO_CUDA="1")
        self.assertEqual((r["status"], r["missing_module"]), ("dependency_error", "cuda"))

    def test_missing_bitsandbytes_for_qlora(self):
        r, _ = self.run_probe(good_config(method="qlora", quant={"scheme": "nf4", "double_quant": True}))
        self.assertEqual((r["status"], r["missing_module"]), ("dependency_error", "bitsandbytes"))


class OptimizerImplTest(unittest.TestCase):
    """optimizer_impl reads the flags as torch's step will: only when neither
    fused nor foreach is given does torch pick, and then foreach on CUDA."""

    def opt(self, module, fused, foreach, cuda=True):
        class P:
            is_cuda = cuda
        cls = type("AdamW", (), {"__module__": module})
        o = cls()
        o.param_groups = [{"params": [P()], "fused": fused, "foreach": foreach}]
        return o

    def test_flags(self):
        t = "torch.optim.adamw"
        self.assertEqual(probe.optimizer_impl(self.opt(t, None, None)), "foreach")
        self.assertEqual(probe.optimizer_impl(self.opt(t, None, None, cuda=False)), "for-loop")
        # fused=False given alone: torch skips its default and runs the loop.
        self.assertEqual(probe.optimizer_impl(self.opt(t, False, None)), "for-loop")
        self.assertEqual(probe.optimizer_impl(self.opt(t, True, None)), "fused")
        self.assertEqual(probe.optimizer_impl(self.opt(t, None, True)), "foreach")
        self.assertEqual(probe.optimizer_impl(self.opt("bitsandbytes.optim.adamw", None, None)), "own")

    def test_no_param_groups(self):
        cls = type("AdamW", (), {"__module__": "torch.optim.adamw"})
        self.assertIsNone(probe.optimizer_impl(cls()))


if __name__ == "__main__":
    unittest.main()


"""What both recipe load-back tests share: the canifinetune binary, and the
plans they emit with it (imported by test_recipes.py and test_stacks.py; it
imports nothing beyond the standard library, so either environment runs it).

The Go binary comes from CANIFINETUNE_BIN, else `go build` into a temporary
directory.
"""

import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The family's LoRA scope keywords as module names (Llama and Qwen2 name
# their projections alike).
SCOPES = {
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "mlp": ["gate_proj", "up_proj", "down_proj"],
}
SCOPES["all-linear"] = SCOPES["attention"] + SCOPES["mlp"]

_bin = None


def binary():
    global _bin
    if _bin:
        return _bin
    _bin = os.environ.get("CANIFINETUNE_BIN")
    if not _bin:
        out = tempfile.mkdtemp(prefix="canifinetune-bin-")
        _bin = os.path.join(out, "canifinetune")
        subprocess.run(["go", "build", "-o", _bin, "./cmd/canifinetune"], cwd=ROOT, check=True)
    return _bin


def cli(*args):
    r = subprocess.run([binary(), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"canifinetune {' '.join(args)}: exit {r.returncode}\n{r.stderr}")
    return r.stdout


def emit(plans, tmp):
    """For each name: (plan arguments, a predicate on a ranked plan) in plans,
    runs `plan ... --json`, takes the first ranked plan the predicate accepts
    and emits its recipe under tmp/name. Returns {name: (plan, directory)}."""
    recipes = {}
    for name, (args, choose) in plans.items():
        doc = json.loads(cli("plan", *args, "--json"))
        chosen = [p for p in doc["plans"] if choose(p)]
        if not chosen:
            raise AssertionError(f"{name}: no plan of the wanted kind among {len(doc['plans'])}")
        plan = chosen[0]
        out = os.path.join(tmp, name)
        cli("plan", *args, "--emit", out, "--emit-plan", str(plan["rank"]))
        recipes[name] = (plan, out)
    return recipes

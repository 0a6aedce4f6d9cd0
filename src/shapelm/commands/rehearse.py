"""The paper at CPU size: `shapelm rehearse -- --profile slurm [TARGET]`.

A rehearsal is configs/paper.yaml with everything kept but size: the same 74 runs, rules, SLURM
resource shapes (1 GPU, 8 GPUs, 2 and 4 nodes, one process per GPU), segment chains (at most 2
jobs), recipes and data source kinds, with widths / 32, heads / 8, layers / 8, sequences / 64,
vocabularies those of small stand-in tokenizers and 4 optimizer steps per run. Its inputs are real formats made from the
embedded corpus: OLMo-2 uint32 shards read over HTTP byte ranges, the v3-small validation
files, tokenizers in a Hugging Face cache under the paper's repo ids, PG19 / Proof-pile / essay /
QA files (shapelm.data.rehearsal, shapelm.longctx.rehearsal). Jobs see no GPU: each "GPU" is a
gloo process on the CPU.

`shapelm rehearse` writes the inputs (once), serves them over HTTP, and runs Snakemake with
`--config rehearsal={inputs: DIR, url: URL}`; the Snakefile then plans `rehearsal_config(...)`
instead of the config it was given (shapelm.plan.cpu_size; outputs under work/rehearsal,
results/rehearsal).

What differs from the paper besides size (documented in docs/TRAINING.md): each run's own task
set (OLMo's, Tapered's) runs through lm-eval on stand-in data cut from the validation text (the
hub's datasets are out of reach; docs/EVALUATION.md "Stand-in data"), beside the held-out tasks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from shapelm.errors import ConfigError
from shapelm.plan.cpu_size import OVERRIDES_FILE

def write_inputs(inputs: Path) -> dict[str, Any]:
    """Every input the rehearsal reads, in its real format; the overrides file last."""
    from shapelm.data.rehearsal import write_data_inputs
    from shapelm.longctx.rehearsal import write_longctx_inputs
    from shapelm import files
    from shapelm.config import merge

    inputs.mkdir(parents=True, exist_ok=True)
    overrides = merge(write_data_inputs(inputs), write_longctx_inputs(inputs))
    files.write_json(inputs / OVERRIDES_FILE, overrides, **files.RUN_FILE)
    return overrides


def _rehearse(args) -> int:
    from shapelm.data.rehearsal import serve  # byte-range requests, as the OLMo data host serves
    inputs = Path(args.inputs).resolve()
    if args.rewrite or not (inputs / OVERRIDES_FILE).exists():
        print(f"shapelm rehearse: writing inputs to {inputs}", file=sys.stderr, flush=True)
        write_inputs(inputs)
    # The same port every time for the same inputs: the URL is part of the slices' plan, so a
    # rerun on another port would redo (and first refuse) the slices already written.
    port = args.port if args.port else 20000 + int.from_bytes(str(inputs).encode(), "big") % 20000
    try:
        server, url = serve(inputs, port=port, host=args.host)
    except OSError as err:
        raise ConfigError(f"rehearse: cannot serve on {args.host}:{port} ({err}); pass --port") from None
    print(f"shapelm rehearse: serving {inputs} at {url}", file=sys.stderr, flush=True)
    extra = list(args.snakemake_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    # Snakemake reads a --config value as YAML: JSON (a subset) quotes any path or URL safely.
    settings = json.dumps({"inputs": str(inputs), "url": url})
    cmd = [str(Path(sys.executable).parent / "snakemake"), *extra, "--config", f"rehearsal={settings}"]
    print("shapelm rehearse: " + " ".join(cmd), file=sys.stderr, flush=True)
    try:
        return subprocess.call(cmd)
    finally:
        server.shutdown()
        server.server_close()


def add_commands(subparsers) -> None:
    p = subparsers.add_parser("rehearse", help="run the paper's DAG at CPU size (inputs made here)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inputs", default="work/rehearsal-inputs", help="where the inputs are written")
    p.add_argument("--host", default="127.0.0.1", help="address the compute nodes reach this host at")
    p.add_argument("--port", type=int, default=0, help="HTTP port (default: one fixed per --inputs)")
    p.add_argument("--rewrite", action="store_true", help="write the inputs again")
    p.add_argument("snakemake_args", nargs=argparse.REMAINDER, metavar="-- SNAKEMAKE_ARGS",
                   help="Snakemake's arguments, after --")
    p.set_defaults(func=_rehearse)

"""The fetch stage: every external input of an experiment as one `fetch` job of the DAG.

The jobs that read an input run where the hub may be out of reach (compute nodes, often with
``HF_HUB_OFFLINE=1``), so nothing there downloads. The ``fetch`` rule (a Snakemake local rule:
it runs on the host running Snakemake, where the network is) downloads each input into the
Hugging Face cache the jobs read, and every job that reads it depends on its record
``work/EXP/inputs/NAME.json`` (repo, requested revision, the commit fetched, the local path):

* tokenizers named by hub id (``data.tokenizer``, a scale's ``data.tokenizer``, the slicer's
  source tokenizer), their ``tokenizer.json`` and configs: ``huggingface_hub.snapshot_download``;
* long-context inputs given as ``hf:OWNER/NAME[/SUBDIR]`` dataset repos (PG19, Proof-pile, the
  RULER QA sets): the split the stage reads, nothing else;
* lm-eval's task datasets of the runs' ``eval.tasks``: ``datasets.load_dataset`` (what lm-eval
  calls) fills the datasets cache lm-eval reads offline;
* the GPT-2 family of Tapered Section 4's novelty analysis (``novelty_hf`` jobs);
* long-context inputs given as local files (RULER's essay file): no hub repository holds them;
  their job only checks that the file is there and says where it comes from if not.

A revision pinned in the config (``owner/name@REV`` for a tokenizer) is the one fetched; the
commit a branch resolved to is recorded either way. The OLMo-2 shards are not inputs of this
stage: the slicer streams them (shapelm.data).

`shapelm.plan.inputs.experiment_inputs(exp)` lists the inputs (plan time, no network, no cache lookups);
`fetch(inp)` fetches one (one `FetchError` line for a gated repository without a token, an
unknown one, or one absent from the cache under ``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from shapelm.errors import DataError
from shapelm.plan.inputs import KINDS, Input, slug


class FetchError(DataError):
    """An input that cannot be fetched, as one line naming it."""


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE) or os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


#: A hub repository id: ``owner/name``, each part letters, digits, ``.``, ``_``, ``-`` (the hub's
#: own rule), starting and ending with a letter or digit; no ``..``, no more parts, no path.
HUB_REPO_ID = re.compile(r"(?!.*\.\.)[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
                         r"/[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?")


def check_repo_id(inp: Input) -> None:
    """Refuse (one line naming --repo) a hub input whose id is not ``owner/name``: an id such as
    ``../../etc`` would name a path, not a repository, in the cache and in the request."""
    if inp.kind != "file" and not HUB_REPO_ID.fullmatch(inp.repo):
        raise FetchError(f"--repo {inp.repo!r}: not a hub repository id; a {inp.kind} is given as "
                         "owner/name (letters, digits, '.', '_', '-'; no '..')")


def fetch(inp: Input, progress: bool = True) -> dict[str, Any]:
    """Fetch `inp` into the local HF caches; its record (see the module docstring)."""
    check_repo_id(inp)
    record = {"input": asdict(inp)}
    if inp.kind == "file":
        path = Path(inp.repo).expanduser()
        if not path.exists():
            raise FetchError(f"{inp.repo}: no such file, needed by {inp.needed_by}; no hub repository "
                             f"holds it, place it there ({inp.hint})" if inp.hint else
                             f"{inp.repo}: no such file, needed by {inp.needed_by}")
        return {**record, "path": str(path.resolve())}
    if inp.kind == "task":
        return {**record, **_fetch_task(inp)}
    return {**record, **_fetch_repo(inp, progress)}


def _fetch_repo(inp: Input, progress: bool) -> dict[str, Any]:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    repo_type = "dataset" if inp.kind == "dataset" else "model"
    at = f" at revision {inp.revision}" if inp.revision else ""
    who = f"{inp.repo}{at} ({repo_type}, needed by {inp.needed_by})"
    offline = _offline()
    for client in ("httpx", "httpx2"):  # one INFO line per request: the progress bar says enough
        logging.getLogger(client).setLevel(logging.WARNING)
    if not progress:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    try:
        path = snapshot_download(inp.repo, repo_type=repo_type, revision=inp.revision,
                                 allow_patterns=list(inp.include) or None, local_files_only=offline)
    except GatedRepoError:
        raise FetchError(f"{who}: a gated repository; accept its terms at "
                         f"https://huggingface.co/{inp.repo} and give a token (HF_TOKEN, or `hf auth login`)") from None
    except RevisionNotFoundError:
        raise FetchError(f"{who}: the hub has no such revision") from None
    except RepositoryNotFoundError:
        raise FetchError(f"{who}: no such repository on {_endpoint()} (or it is private: give a token)") from None
    except LocalEntryNotFoundError:
        if offline:
            raise FetchError(f"{who}: not in the local HF cache, and HF_HUB_OFFLINE=1 forbids downloading it; "
                             "run the fetch jobs where the hub is reachable") from None
        raise FetchError(f"{who}: {_endpoint()} cannot be reached and the local HF cache lacks it") from None
    except HfHubHTTPError as err:
        raise FetchError(f"{who}: {str(err).splitlines()[0]}") from None
    snapshot = Path(path)
    files = sorted(str(p.relative_to(snapshot)) for p in snapshot.rglob("*") if p.is_file())
    if not files:
        raise FetchError(f"{who}: no file of the repository matches {list(inp.include)}")
    return {"repo_type": repo_type, "commit": snapshot.name, "path": str(snapshot), "files": files}


def _fetch_task(inp: Input) -> dict[str, Any]:
    import datasets

    who = f"{inp.repo}" + (f" ({inp.config})" if inp.config else "") + f", needed by {inp.needed_by}"
    try:
        ds = datasets.load_dataset(inp.repo, inp.config, revision=inp.revision)
    except Exception as err:  # datasets raises ConnectionError, DatasetNotFoundError, ValueError...
        if _offline() or datasets.config.HF_HUB_OFFLINE:
            raise FetchError(f"{who}: not in the datasets cache, and HF_HUB_OFFLINE=1 forbids downloading "
                             "it; run the fetch jobs where the hub is reachable") from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise FetchError(f"{who}: datasets cannot load it ({err.__class__.__name__}: {first})") from None
    return {"splits": {split: len(d) for split, d in ds.items()}}


def _endpoint() -> str:
    from huggingface_hub import constants

    return constants.ENDPOINT


def write_record(record: dict[str, Any], out: str | os.PathLike) -> None:
    from shapelm import files

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    files.write_json(out, record, **files.RUN_FILE)


def add_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "fetch", help="download one external input into the local HF cache (the `fetch` jobs)",
        formatter_class=__import__("argparse").ArgumentDefaultsHelpFormatter)
    p.add_argument("--kind", choices=KINDS, required=True,
                   help="model / dataset: a hub repository; task: lm-eval's datasets.load_dataset; "
                        "file: a local file that must be there")
    p.add_argument("--repo", required=True, help="hub id (owner/name), or the path of a file")
    p.add_argument("--name", default="", help="the input's name in the workflow")
    p.add_argument("--needed-by", default="this experiment", help="what reads it (for messages)")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    p.add_argument("--config", default=None, help="a task dataset's configuration name")
    p.add_argument("--include", action="append", default=[],
                   help="only files matching this pattern (repeatable; default: every file)")
    p.add_argument("--hint", default="", help="where a missing file comes from")
    p.add_argument("--out", required=True, help="the record (JSON) to write")
    p.add_argument("--no-progress", action="store_true", help="no download progress bars")
    p.set_defaults(func=_cmd_fetch)


def _cmd_fetch(args) -> int:
    inp = Input(args.name or slug(args.repo), args.kind, args.repo, args.needed_by, args.revision,
                tuple(args.include), args.config, args.hint)
    record = fetch(inp, progress=not args.no_progress)
    write_record(record, args.out)
    print(json.dumps({k: record[k] for k in ("commit", "path", "splits") if k in record}))
    return 0


"""No code runs from a checkpoint: a checkpoint without its checksum list is not used, and a
sharded checkpoint whose DCP index (`dcp/.metadata`, a pickle) or whose non-tensor items (pickled
bytes in a shard) were replaced by code, with meta.json's sizes and sha256s rewritten to match,
is refused on resume and on reading, with the code never run."""

from __future__ import annotations

import builtins
import hashlib
import io
import json
import logging
import pickle
from pathlib import Path

import pytest
import torch

from shapelm.train import checkpoint as ckpt


class _RunsCode:
    """Unpickles to a call of exec: what an attacker would put in a pickle."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return builtins.exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def _tiny():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    return model, opt


def _sharded_checkpoint(out: Path, step: int = 1) -> Path:
    """A sharded checkpoint written by one process, sealed as training seals it."""
    model, opt = _tiny()
    tmp = ckpt.begin_save(out, step)
    digests = ckpt.save_sharded(model, opt, tmp, rank=0)()
    digests["trainer.pt"] = ckpt.save_torch({"step": step}, tmp / "trainer.pt")
    return ckpt.finish_save(tmp, step, {"checkpoint_format": "sharded"}, digests)


def _reseal(path: Path) -> None:
    """Rewrite meta.json's sizes and sha256s to match the files: what an attacker who can
    write the directory does, so that the checksums alone cannot tell."""
    meta = json.loads((path / "meta.json").read_text())
    for name in meta["files"]:
        data = (path / name).read_bytes()
        meta["files"][name], meta["sha256"][name] = len(data), hashlib.sha256(data).hexdigest()
    (path / "meta.json").write_text(json.dumps(meta))


def _rig_lr_item(path: Path, payload) -> None:
    """Point the optimizer's lr item (torch.save bytes in a shard) at `payload`, appended to the
    shard, and reseal: the index stays plain DCP metadata."""
    index = ckpt.read_dcp_metadata(path / "dcp")
    key = next(k for k in index.storage_data if k.fqn.endswith(".lr"))
    info = index.storage_data[key]
    shard = path / "dcp" / info.relative_path
    blob = io.BytesIO()
    torch.save(payload, blob)
    info.offset, info.length = shard.stat().st_size, len(blob.getvalue())
    with open(shard, "ab") as f:
        f.write(blob.getvalue())
    (path / "dcp" / ".metadata").write_bytes(pickle.dumps(index))
    _reseal(path)


def test_a_checkpoint_without_its_checksum_list_is_not_used(tmp_path, caplog):
    older, newer = _sharded_checkpoint(tmp_path, 1), _sharded_checkpoint(tmp_path, 2)
    meta = json.loads((newer / "meta.json").read_text())
    del meta["sha256"]
    (newer / "meta.json").write_text(json.dumps(meta))
    why = ckpt.problem(newer)
    assert why is not None and "has no sha256 checksum list" in why and "\n" not in why
    with caplog.at_level(logging.WARNING):
        assert ckpt.latest_valid(tmp_path) == (1, older)
    assert "step-00000002: checkpoint skipped" in caplog.text
    with pytest.raises(ckpt.UnsafeCheckpointError, match="no sha256 checksum list"):
        ckpt.load_model_state(newer)


def test_a_file_missing_from_the_checksum_list_is_not_used(tmp_path):
    path = _sharded_checkpoint(tmp_path)
    meta = json.loads((path / "meta.json").read_text())
    del meta["sha256"]["dcp/.metadata"]
    (path / "meta.json").write_text(json.dumps(meta))
    assert "dcp/.metadata: no sha256 in meta.json" in ckpt.problem(path)
    _reseal(path)  # a file that meta.json does not list at all
    (path / "dcp" / "extra.distcp").write_bytes(b"x")
    assert "dcp/extra.distcp: no sha256 in meta.json" in ckpt.problem(path)


def test_a_replaced_dcp_index_runs_no_code(tmp_path):
    path = _sharded_checkpoint(tmp_path)
    model, opt = _tiny()
    ckpt.load_sharded(path, model, opt)  # the untouched checkpoint reads back
    marker = tmp_path / "code-ran"
    (path / "dcp" / ".metadata").write_bytes(pickle.dumps(_RunsCode(marker)))
    _reseal(path)
    why = ckpt.problem(path)
    assert why is not None and "refers to builtins.exec" in why and ".metadata" in why
    assert ckpt.latest_valid(tmp_path) is None
    with pytest.raises(ckpt.UnsafeCheckpointError, match="builtins.exec"):
        ckpt.load_model_state(path)
    with pytest.raises(ckpt.UnsafeCheckpointError, match="builtins.exec"):
        ckpt.load_sharded(path, model, opt)
    assert not marker.exists()


def test_code_in_a_non_tensor_dcp_item_is_not_run(tmp_path):
    """The optimizer's hyper-parameters are `torch.save` bytes inside a shard; torch's planner
    reads them with weights_only=False. Point one at an appended pickle that runs code."""
    path = _sharded_checkpoint(tmp_path)
    marker = tmp_path / "code-ran"
    _rig_lr_item(path, _RunsCode(marker))
    # the index itself is plain DCP metadata; the item is refused before any state is loaded
    why = ckpt.problem(path)
    assert why is not None and "optimizer.param_groups.0.lr: not plain data" in why and "\n" not in why
    model, opt = _tiny()
    with pytest.raises(ckpt.UnsafeCheckpointError, match="optimizer.param_groups.0.lr: not plain data"):
        ckpt.load_sharded(path, model, opt)
    assert not marker.exists()


def _full_checkpoint(out: Path, step: int) -> Path:
    """A full-format checkpoint (model.pt, optimizer.pt, trainer.pt), sealed as training seals it."""
    model, opt = _tiny()
    tmp = ckpt.begin_save(out, step)
    digests = {"model.pt": ckpt.save_torch(model.state_dict(), tmp / "model.pt"),
               "optimizer.pt": ckpt.save_torch(opt.state_dict(), tmp / "optimizer.pt"),
               "trainer.pt": ckpt.save_torch({"step": step}, tmp / "trainer.pt")}
    return ckpt.finish_save(tmp, step, {}, digests)


class _CallsSystem:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        import os
        return os.system, (f"touch {self.marker}",)


def _rig_torch_save(path: Path, marker: Path) -> None:
    torch.save({"step": 2, "payload": _CallsSystem(marker)}, path)


def _rig_raw_pickle(path: Path, marker: Path) -> None:
    # protocol 0, a GLOBAL opcode naming os.system and a call of it: no torch container at all
    path.write_bytes(b"cos\nsystem\n(S'touch " + str(marker).encode() + b"'\ntR.")


@pytest.mark.parametrize("name", ["model.pt", "optimizer.pt", "trainer.pt"])
@pytest.mark.parametrize("rig", [_rig_torch_save, _rig_raw_pickle], ids=["torch_save", "raw_pickle"])
def test_a_full_checkpoint_naming_code_is_skipped_for_the_previous_one(name, rig, tmp_path, caplog):
    older, newer = _full_checkpoint(tmp_path, 1), _full_checkpoint(tmp_path, 2)
    marker = tmp_path / "code-ran"
    rig(newer / name, marker)
    _reseal(newer)  # the checksums match: only the weights-only load can tell
    why = ckpt.problem(newer)
    assert why is not None and name in why and "\n" not in why
    with caplog.at_level(logging.WARNING):
        assert ckpt.latest_valid(tmp_path) == (1, older)  # the run resumes from the older one
    assert "step-00000002: checkpoint skipped, the previous one is used instead" in caplog.text
    assert ckpt.load_torch(older / "trainer.pt") == {"step": 1}
    with pytest.raises(ckpt.UnsafeCheckpointError, match=name):
        ckpt.load_model_state(newer)
    assert not marker.exists()


def test_a_sharded_checkpoint_with_a_refused_dcp_item_is_skipped_for_the_previous_one(tmp_path, caplog):
    older, newer = _sharded_checkpoint(tmp_path, 1), _sharded_checkpoint(tmp_path, 2)
    marker = tmp_path / "code-ran"
    _rig_lr_item(newer, _CallsSystem(marker))
    with caplog.at_level(logging.WARNING):
        assert ckpt.latest_valid(tmp_path) == (1, older)
    assert "not plain data" in caplog.text
    model, opt = _tiny()
    ckpt.load_sharded(older, model, opt)  # the previous checkpoint loads
    assert not marker.exists()

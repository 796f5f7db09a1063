from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from app.engine.folders import FolderError
from app.engine.moss_speech.config import MossSpeechConfig
from app.engine.moss_speech.model import MossSpeechModel
from app.engine.moss_speech.quantize import PrecisionError
from app.engine.moss_speech.testing import write_tiny_checkpoint
from app.engine.moss_speech.weights import load_model


@pytest.fixture(scope="module")
def sharded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_checkpoint(tmp_path_factory.mktemp("sharded") / "model", seed=0, shards=3)


def test_sharded_and_single_file_load_the_same_weights(tiny_dir: Path, sharded_dir: Path,
                                                       tiny_model: MossSpeechModel) -> None:
    assert (sharded_dir / "model.safetensors.index.json").is_file()
    sharded = load_model(sharded_dir, precision="fp32")
    assert sharded.state_dict().keys() == tiny_model.state_dict().keys()
    for name, value in sharded.state_dict().items():
        assert torch.equal(value, tiny_model.state_dict()[name]), name
    on_disk = load_file(str(tiny_dir / "model.safetensors"))
    assert torch.equal(tiny_model.text_lm_head.weight, on_disk["text_lm_head.weight"].float())


def test_bf16_by_default_and_fp32_on_request(tiny_dir: Path,
                                             tiny_model: MossSpeechModel) -> None:
    model = load_model(tiny_dir)
    assert model.dtype == torch.bfloat16 and model.precision == "bf16"
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert tiny_model.dtype == torch.float32
    assert not any(p.requires_grad for p in model.parameters())
    assert not torch.equal(model.text_lm_head.weight.float(), model.model.embed_tokens.weight
                           .float())  # never tied


def copy_of(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / "copy"))


def rewrite(file: Path, change) -> None:
    tensors = load_file(str(file))
    change(tensors)
    save_file(tensors, str(file))


def missing_shard(folder: Path) -> None:
    (folder / "model-00002-of-00003.safetensors").unlink()


def truncated(folder: Path) -> None:
    file = folder / "model-00003-of-00003.safetensors"
    file.write_bytes(file.read_bytes()[:-1000])


def missing_key(folder: Path) -> None:
    rewrite(folder / "model-00003-of-00003.safetensors",
            lambda t: t.pop("text_lm_head.weight"))


def extra_key(folder: Path) -> None:
    rewrite(folder / "model-00001-of-00003.safetensors",
            lambda t: t.update({"model.bogus.weight": torch.zeros(3)}))


def wrong_shape(folder: Path) -> None:
    rewrite(folder / "model-00003-of-00003.safetensors",
            lambda t: t.update({"text_lm_head.weight": torch.zeros(10, 64)}))


def config_mismatch(folder: Path) -> None:
    config = MossSpeechConfig.tiny().with_(intermediate_size=96)
    (folder / "config.json").write_text(json.dumps(config.to_dict()))


def not_safetensors(folder: Path) -> None:
    torch.save({"x": torch.zeros(2)}, folder / "model-00002-of-00003.safetensors")


def bad_dtype(folder: Path) -> None:
    rewrite(folder / "model-00003-of-00003.safetensors",
            lambda t: t.update({"model.text_norm.weight": torch.zeros(64, dtype=torch.int8)}))


BAD_CASES = [
    (missing_shard, r"model-00002-of-00003\.safetensors"),
    (truncated, r"model-00003-of-00003\.safetensors: file is truncated"),
    (missing_key, r"1 tensor\(s\) missing, e\.g\. text_lm_head\.weight"),
    (extra_key, r"unexpected tensor\(s\) in model-00001-of-00003\.safetensors.*model\.bogus"),
    (wrong_shape, r"model-00003-of-00003\.safetensors: 'text_lm_head\.weight' has shape "
                  r"\[10, 64\], config\.json expects \[151680, 64\]"),
    (config_mismatch, r"mlp\.down_proj\.weight' has shape \[64, 128\], config\.json expects "
                      r"\[64, 96\]"),
    (not_safetensors, r"model-00002-of-00003\.safetensors: not a safetensors file"),
    (bad_dtype, r"'model\.text_norm\.weight' has dtype I8"),
]


@pytest.mark.parametrize(("damage", "message"), BAD_CASES, ids=[c[0].__name__ for c in BAD_CASES])
def test_bad_folder_fails_in_verification_naming_the_file(
        sharded_dir: Path, tmp_path: Path, damage, message: str) -> None:
    folder = copy_of(sharded_dir, tmp_path)
    damage(folder)
    stages: list[str] = []
    with pytest.raises(FolderError, match=message) as info:
        load_model(folder, progress=lambda stage, _fraction: stages.append(stage))
    assert stages == ["verify"], "the error must come before the model is built or loaded"
    assert str(info.value).count("\n") <= 10  # one bounded message, even for many problems


def test_missing_config_and_folder(tmp_path: Path) -> None:
    with pytest.raises(FolderError, match="does not exist"):
        load_model(tmp_path / "nowhere")
    tmp_path.joinpath("m").mkdir()
    with pytest.raises(FolderError, match=r"config\.json: missing"):
        load_model(tmp_path / "m")


def test_impossible_precision_is_refused_before_reading_files(tmp_path: Path) -> None:
    with pytest.raises(PrecisionError, match="int4 needs a CUDA GPU"):
        load_model(tmp_path / "nowhere", precision="int4")
    with pytest.raises(PrecisionError, match="not one of"):
        load_model(tmp_path / "nowhere", precision="fp8")


def test_progress_reports_every_unit(tiny_dir: Path) -> None:
    seen: list[tuple[str, float]] = []
    load_model(tiny_dir, progress=lambda stage, fraction: seen.append((stage, fraction)))
    assert [s for s, _ in seen[:2]] == ["verify", "build"]
    loads = [f for s, f in seen if s == "load"]
    kv_layers = MossSpeechConfig.tiny().kv_layers
    assert loads[-1] == 1.0 and len(loads) == 2 + kv_layers + 4  # embeddings, layers, norms, heads

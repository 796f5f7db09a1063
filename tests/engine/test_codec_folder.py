"""Codec-folder verification on the tiny codec in the published layout: every case below was
once shown as "✓ every file and shape as expected" and then failed to load, blaming another
file. Verification now checks what loading checks, from headers only, naming the right file."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from app.engine.codec_config import (
    CodecConfig,
    EstimatorConfig,
    FlowEncoderConfig,
    HiFTConfig,
    WhisperVQConfig,
)
from app.engine.codec_shapes import flow_shapes, hift_shapes, whisper_shapes
from app.engine.folders import CODEC_REQUIRED_FILES, FolderError, verify_codec_folder
from app.engine.moss_speech.codec import CodecLoadError, load_codec
from app.engine.moss_speech.codec.flow import Flow
from app.engine.moss_speech.codec.hift import HiFTGenerator
from app.engine.moss_speech.codec.loader import load_into
from app.engine.moss_speech.codec.testing import write_tiny_codec
from app.engine.moss_speech.codec.whisper_vq import WhisperVQEncoder


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_codec(tmp_path_factory.mktemp("tiny-codec") / "codec", seed=0)


@pytest.fixture
def codec(written: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(written, tmp_path / "codec"))


def problems_of(folder: Path) -> list[str]:
    check = verify_codec_folder(folder)
    assert not check.ok
    return check.problems


def state_shapes(module: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in module.state_dict().items()}


VARIANTS = [
    CodecConfig.tiny(),
    CodecConfig.full(),
    replace(CodecConfig.tiny(),
            whisper=WhisperVQConfig(d_model=48, encoder_attention_heads=3, encoder_ffn_dim=40,
                                    num_mel_bins=16, max_source_positions=30, pooling_position=1,
                                    quantize_position=3, quantize_vocab_size=50),
            hift=HiFTConfig(base_channels=24, upsample_rates=(4, 2), upsample_kernel_sizes=(8, 4),
                            resblock_kernel_sizes=(3, 5), resblock_dilation_sizes=((1,), (1, 2)),
                            source_resblock_kernel_sizes=(3,),
                            source_resblock_dilation_sizes=((1, 3),), f0_cond_channels=6,
                            nb_harmonics=3, istft_n_fft=8)),
]


@pytest.mark.parametrize("config", VARIANTS, ids=["tiny", "full", "odd"])
def test_torch_free_shapes_equal_the_modules_state_dicts(config: CodecConfig) -> None:
    odd_flow = replace(config.flow, encoder=FlowEncoderConfig(
        input_size=24, output_size=20, attention_heads=5, linear_units=12, num_blocks=2,
        num_up_blocks=3, upsample_stride=2, pre_lookahead_len=2), estimator=EstimatorConfig(
        channels=(12,), attention_head_dim=5, n_blocks=2, num_mid_blocks=3, num_heads=3))
    with torch.device("meta"):
        assert whisper_shapes(config.whisper) == state_shapes(WhisperVQEncoder(config.whisper))
        assert hift_shapes(config.hift) == state_shapes(HiFTGenerator(config.hift))
        for flow in (config.flow, odd_flow):
            for chunk in (0, 5):
                assert flow_shapes(flow) == state_shapes(Flow(flow, chunk=chunk))


def test_the_tiny_codec_verifies(written: Path) -> None:
    check = verify_codec_folder(written)
    assert check.ok, check.problems
    assert check.total_bytes == sum((written / n).stat().st_size for n in CODEC_REQUIRED_FILES)


def test_a_config_json_that_no_longer_matches_the_tensors(codec: Path, tmp_path: Path) -> None:
    config = json.loads((codec / "config.json").read_text())
    config["d_model"] = 96
    (codec / "config.json").write_text(json.dumps(config))
    problems = problems_of(codec)
    assert problems[0].startswith("config.json and model.safetensors disagree: ")
    assert "(d_model 96 in config.json, 64 in the weights)" in problems[0]
    assert len(problems) <= 4 and "flow/config.yaml" not in " ".join(problems)
    with pytest.raises(FolderError, match=r"config\.json and model\.safetensors disagree"):
        load_codec(codec, voice_cache_dir=tmp_path)


@pytest.mark.parametrize(("name", "content", "message"), [
    ("flow/config.yaml", b"flow: [unclosed\n  - {", "flow/config.yaml: not readable YAML"),
    ("flow/config.yaml", b"just a string", "flow/config.yaml: not a YAML mapping"),
    ("flow/config.yaml", b"\xff\xfe\x00garbage", "flow/config.yaml: not a text file"),
    ("flow/campplus.onnx", bytes(range(256)) * 40, "flow/campplus.onnx: not a usable ONNX model"),
    ("flow/campplus.onnx", b"\x08\x07" + b"\x3a\xff\xff\x03",
     "flow/campplus.onnx: not a usable ONNX model (a field runs past the end"),
    ("flow/flow.pt", b"PK\x03\x04 cut", "flow/flow.pt: damaged or not a PyTorch checkpoint"),
    ("model.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{}", "model.safetensors: not a "
                                                                 "safetensors file"),
    ("flow/config.yaml", b"", "flow/config.yaml: empty file"),
    ("flow/campplus.onnx", b"", "flow/campplus.onnx: empty file"),
])
def test_a_garbage_file_is_named(codec: Path, name: str, content: bytes, message: str) -> None:
    (codec / name).write_bytes(content)
    problems = problems_of(codec)
    assert any(p.startswith(message) for p in problems), problems


def test_a_truncated_onnx_model_is_refused(codec: Path) -> None:
    path = codec / "flow" / "campplus.onnx"
    path.write_bytes(path.read_bytes()[:-10])
    assert problems_of(codec)[0].startswith("flow/campplus.onnx: not a usable ONNX model")


class Payload:
    """Unpickling this would import this module and call its constructor."""

    def __reduce__(self) -> tuple:
        return (shutil.rmtree, ("/nonexistent-moss-voice-test",))


def test_a_pickled_hift_pt_is_refused_without_unpickling_it(codec: Path, tmp_path: Path) -> None:
    state = torch.load(codec / "flow" / "hift.pt", weights_only=True)
    state["extra"] = Payload()
    torch.save(state, codec / "flow" / "hift.pt")
    (problem,) = problems_of(codec)
    assert problem.startswith("flow/hift.pt: holds Python objects other than tensors (it names "
                              "shutil.rmtree)")
    assert "could run code" in problem
    with pytest.raises(FolderError, match=r"flow/hift\.pt: holds Python objects"):
        load_codec(codec, voice_cache_dir=tmp_path)


def test_the_loader_refuses_a_pickle_too_when_called_directly(codec: Path) -> None:
    from app.engine.moss_speech.codec.loader import read_pt

    torch.save({"w": torch.zeros(2), "x": Payload()}, codec / "flow" / "flow.pt")
    with pytest.raises(CodecLoadError, match=r"flow/flow\.pt contains Python objects"):
        read_pt(codec / "flow" / "flow.pt", "flow/flow.pt")


def edit_checkpoint(path: Path, change) -> None:
    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(state, path)


def test_an_extra_tensor_in_flow_pt_is_accepted_and_logged_once(
        codec: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Upstream loads flow.pt with strict=False: a published file with one more tensor loads."""
    edit_checkpoint(codec / "flow" / "flow.pt",
                    lambda s: s.update({"decoder.estimator.unused_buffer": torch.zeros(3)}))
    assert verify_codec_folder(codec).ok, verify_codec_folder(codec).problems
    with caplog.at_level(logging.WARNING):
        loaded = load_codec(codec, voice_cache_dir=tmp_path, offline_flow=True)  # reads flow.pt
    extra = [r for r in caplog.records if "decoder.estimator.unused_buffer" in r.getMessage()]
    assert len(extra) == 1 and "flow/flow.pt" in extra[0].getMessage()
    assert "unused_buffer" not in dict(loaded.flow(0).named_buffers())


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s.pop("encoder_proj.bias"), "flow/flow.pt: 1 tensor(s) missing, e.g. "
                                           "encoder_proj.bias"),
    (lambda s: s.update({"encoder_proj.weight": torch.zeros(80, 7)}),
     "flow/flow.pt: 'encoder_proj.weight' has shape [80, 7], flow/config.yaml expects [80, 32]"),
])
def test_missing_or_misshaped_flow_tensors_are_refused(codec: Path, tmp_path: Path, change,
                                                       message: str) -> None:
    edit_checkpoint(codec / "flow" / "flow.pt", change)
    assert message in problems_of(codec)
    flow_state = torch.load(codec / "flow" / "flow.pt", weights_only=True)
    with torch.device("meta"):
        flow = Flow(CodecConfig.tiny().flow)
    with pytest.raises(CodecLoadError, match=r"flow/flow\.pt does not match flow/config\.yaml"):
        load_into(flow, flow_state, "flow/flow.pt", extra_allowed=True)


def test_hift_stays_strict_about_extra_tensors(codec: Path) -> None:
    edit_checkpoint(codec / "flow" / "hift.pt", lambda s: s.update({"bogus": torch.zeros(1)}))
    assert "flow/hift.pt: 1 unexpected tensor(s), e.g. bogus" in problems_of(codec)


def test_a_broken_weight_norm_pair_is_named(codec: Path) -> None:
    key = "conv_pre.parametrizations.weight.original0"
    edit_checkpoint(codec / "flow" / "hift.pt", lambda s: s.update({key: torch.ones(3, 1, 1)}))
    assert problems_of(codec) == ["flow/hift.pt: weight-norm pair for 'conv_pre.weight' has "
                                  "shapes [3, 1, 1] and [16, 80, 7]"]


def test_a_storage_shorter_than_its_tensor_is_refused(codec: Path) -> None:
    import zipfile

    path = codec / "flow" / "hift.pt"
    with zipfile.ZipFile(path) as archive:
        entries = [(i, archive.read(i.filename)) for i in archive.infolist()]
    with zipfile.ZipFile(path, "w") as archive:
        for info, data in entries:
            cut = info.filename.endswith("/data/0")
            archive.writestr(info, data[:4] if cut else data)
    assert any("storage 0 is shorter" in p for p in problems_of(codec))


def test_the_speaker_model_width_must_match_the_flow(codec: Path) -> None:
    text = (codec / "flow" / "config.yaml").read_text()
    (codec / "flow" / "config.yaml").write_text(text.replace("spk_embed_dim: 192",
                                                             "spk_embed_dim: 128"))
    problems = problems_of(codec)
    assert ("flow/campplus.onnx: its embedding has 192 values, flow/config.yaml expects "
            "spk_embed_dim 128") in problems
    assert any(p.startswith("flow/config.yaml and flow/flow.pt disagree") for p in problems)


def test_doctor_does_not_call_a_broken_codec_ok(codec: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from app.cli import main
    from app.settings import Settings
    from app.settings_store import save_settings

    (codec / "flow" / "config.yaml").write_text("::: not yaml :::\n  - [")
    save_settings(Settings().with_value("engine.codec_dir", codec))
    assert main(["doctor"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "codec folder" in x)
    assert line.startswith("-- ") and "flow/config.yaml" in line and "verified" not in line
    assert line.endswith(". Download the codec again, or choose another codec folder.")

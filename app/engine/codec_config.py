"""Codec configuration, read from the published folder (config.json, preprocessor_config.json,
flow/config.yaml), with the full-size and tiny presets used by tests and benchmarks.

Torch-free, so folder verification reads exactly what the loader reads. The flow YAML upstream
is a HyperPyYAML file (``!new:``/``!ref`` tags); :mod:`app.engine.codec_yaml` reads it as data,
never importing or running anything, and we fall back to the published values (contract
§3.4/§3.5) for fields it does not state. Every size has a sane maximum (a hostile config cannot
make a check take minutes) and combinations the networks cannot be built with are refused here,
by file, instead of failing later inside the codec.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from app.engine.codec_yaml import find_section, load_flow_yaml
from app.engine.folders import FolderError, load_json


class CodecConfigError(FolderError):
    """A codec configuration file is missing, unreadable or describes an unsupported codec."""


@dataclass(frozen=True)
class FrontEndConfig:
    """Whisper log-mel front end (preprocessor_config.json)."""

    sample_rate_hz: int = 16000
    n_fft: int = 400
    hop_length: int = 160
    n_mels: int = 128
    segment_s: int = 30  # long audio is cut into segments of this length, encoded independently


@dataclass(frozen=True)
class WhisperVQConfig:
    """The speech tokenizer (config.json); only layers below quantize_position are built."""

    d_model: int = 1280
    encoder_attention_heads: int = 20
    encoder_ffn_dim: int = 5120
    num_mel_bins: int = 128
    max_source_positions: int = 1500
    pooling_kernel_size: int = 4
    pooling_position: int = 16
    quantize_position: int = 16
    quantize_vocab_size: int = 16384


@dataclass(frozen=True)
class FlowEncoderConfig:
    """UpsampleConformerEncoder widths (the reference hardcodes 512 channels; we do not)."""

    input_size: int = 512
    output_size: int = 512
    attention_heads: int = 8
    linear_units: int = 2048
    num_blocks: int = 6
    num_up_blocks: int = 4
    upsample_stride: int = 4
    pre_lookahead_len: int = 3


@dataclass(frozen=True)
class EstimatorConfig:
    """CausalConditionalDecoder (the CFM velocity estimator)."""

    in_channels: int = 320
    out_channels: int = 80
    channels: tuple[int, ...] = (256,)
    attention_head_dim: int = 64
    n_blocks: int = 4
    num_mid_blocks: int = 12
    num_heads: int = 8


@dataclass(frozen=True)
class FlowConfig:
    """CausalMaskedDiffWithXvec: token embedding, encoder, CFM with a fixed noise buffer."""

    vocab_size: int = 20480
    mel_bins: int = 80
    spk_embed_dim: int = 192
    token_mel_ratio: int = 4
    encoder: FlowEncoderConfig = field(default_factory=FlowEncoderConfig)
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)
    n_timesteps: int = 10
    inference_cfg_rate: float = 0.7
    noise_frames: int = 15000  # 300 s of mel at 50 frames/s: the longest prompt + reply
    noise_seed: int = 0


@dataclass(frozen=True)
class HiFTConfig:
    """HiFT vocoder (NSF source + iSTFTNet); 480 samples per mel frame at 24 kHz."""

    in_channels: int = 80
    base_channels: int = 512
    nb_harmonics: int = 8
    sampling_rate: int = 24000
    nsf_alpha: float = 0.1
    nsf_sigma: float = 0.003
    nsf_voiced_threshold: float = 10.0
    upsample_rates: tuple[int, ...] = (8, 5, 3)
    upsample_kernel_sizes: tuple[int, ...] = (16, 11, 7)
    istft_n_fft: int = 16
    istft_hop: int = 4
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    source_resblock_kernel_sizes: tuple[int, ...] = (7, 7, 11)
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...] = (
        (1, 3, 5), (1, 3, 5), (1, 3, 5))
    lrelu_slope: float = 0.1
    audio_limit: float = 0.99
    f0_cond_channels: int = 512

    @property
    def samples_per_frame(self) -> int:
        upsample = 1
        for rate in self.upsample_rates:
            upsample *= rate
        return upsample * self.istft_hop


@dataclass(frozen=True)
class CodecConfig:
    front_end: FrontEndConfig = field(default_factory=FrontEndConfig)
    whisper: WhisperVQConfig = field(default_factory=WhisperVQConfig)
    flow: FlowConfig = field(default_factory=FlowConfig)
    hift: HiFTConfig = field(default_factory=HiFTConfig)

    @property
    def samples_per_code(self) -> int:
        """24 kHz output samples per code: 4 mel frames × 480 = 1920 (80 ms)."""
        return self.flow.token_mel_ratio * self.hift.samples_per_frame

    @classmethod
    def full(cls) -> CodecConfig:
        """The published codec's sizes (contract §3.2–§3.5)."""
        return cls()

    @classmethod
    def tiny(cls) -> CodecConfig:
        """Structure-preserving tiny sizes for tests (contract §7)."""
        return cls(
            whisper=WhisperVQConfig(d_model=64, encoder_attention_heads=4, encoder_ffn_dim=128,
                                    pooling_position=2, quantize_position=2),
            flow=FlowConfig(
                encoder=FlowEncoderConfig(input_size=32, output_size=32, attention_heads=2,
                                          linear_units=64, num_blocks=1, num_up_blocks=1),
                estimator=EstimatorConfig(channels=(32,), attention_head_dim=16, n_blocks=1,
                                          num_mid_blocks=1, num_heads=2)),
            hift=HiFTConfig(base_channels=16, resblock_kernel_sizes=(3,),
                            resblock_dilation_sizes=((1, 3, 5),), f0_cond_channels=16),
        )


# ---------------------------------------------------------------------------------------------
# Reading the folder

# Ranges of the integer fields read from the files (default: 1 .. 65,536; the published values
# are in the dataclasses above): counts of layers and heads are small, vocabularies large.
_INT_RANGES: dict[str, tuple[int, int]] = {
    "quantize_vocab_size": (1, 1 << 22), "vocab_size": (1, 1 << 22),
    "max_source_positions": (1, 1 << 20), "sample_rate_hz": (1, 384_000),
    "sampling_rate": (1, 384_000), "segment_s": (1, 3_600),
    "pooling_position": (1, 256), "quantize_position": (1, 256), "num_blocks": (0, 256),
    "num_up_blocks": (0, 256), "n_blocks": (1, 256), "num_mid_blocks": (0, 256),
    "encoder_attention_heads": (1, 1_024), "attention_heads": (1, 1_024), "num_heads": (1, 1_024),
    "nb_harmonics": (0, 256), "pre_lookahead_len": (0, 64), "upsample_stride": (1, 64),
    "pooling_kernel_size": (1, 64), "token_mel_ratio": (1, 64),
}
_DEFAULT_RANGE = (1, 65_536)
_MAX_TUPLE_LENGTH = 16


def _read_json(path: Path) -> dict[str, Any]:
    return load_json(path, "", CodecConfigError)


def _checked_int(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError("not a whole number")
    return int(value)


def _as_tuple(value: Any, depth: int = 0) -> tuple:
    if not isinstance(value, (list, tuple)) or len(value) > _MAX_TUPLE_LENGTH or depth > 2:
        raise TypeError(f"not a list of at most {_MAX_TUPLE_LENGTH} numbers")
    return tuple(_as_tuple(v, depth + 1) if isinstance(v, (list, tuple)) else _checked_int(v)
                 for v in value)


def _flat(value: Any) -> list[int]:
    return [x for v in value for x in _flat(v)] if isinstance(value, tuple) else [value]


def _convert(field_name: str, expected: type, value: Any) -> Any:
    if expected is tuple:
        converted: Any = _as_tuple(value)
        numbers = _flat(converted)
    elif expected is bool:
        return bool(value)
    elif expected is int:
        converted = _checked_int(value)
        numbers = [converted]
    else:
        converted = expected(value)
        if isinstance(converted, float) and not math.isfinite(converted):
            raise ValueError("not a finite number")
        return converted
    low, high = _INT_RANGES.get(field_name, _DEFAULT_RANGE)
    if any(not low <= n <= high for n in numbers):
        raise ValueError(f"outside {low:,} .. {high:,}")
    return converted


def _pick(cls: type, source: Mapping[str, Any], names: Mapping[str, str], where: str) -> Any:
    """Build a dataclass from ``source``: field <- source[key] for each (field, key) present."""
    defaults = cls()
    values: dict[str, Any] = {}
    for field_name, key in names.items():
        if key not in source or source[key] is None:
            continue
        value = source[key]
        expected = type(getattr(defaults, field_name))
        try:
            values[field_name] = _convert(field_name, expected, value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise CodecConfigError(f"{where}: '{key}' = {str(value)[:60]} is not a valid "
                                   f"{expected.__name__} ({exc})") from exc
    return replace(defaults, **values)


def read_front_end(path: Path) -> FrontEndConfig:
    data = _read_json(path)
    config = _pick(FrontEndConfig, data, {
        "sample_rate_hz": "sampling_rate", "n_fft": "n_fft", "hop_length": "hop_length",
        "n_mels": "feature_size", "segment_s": "chunk_length"}, path.name)
    if config.sample_rate_hz != 16000:
        raise CodecConfigError(f"{path.name}: sampling_rate {config.sample_rate_hz} is not 16000")
    return config


def read_whisper(path: Path) -> WhisperVQConfig:
    data = _read_json(path)
    for key in ("d_model", "quantize_vocab_size", "quantize_position"):
        if key not in data:
            raise CodecConfigError(f"{path.name}: missing key '{key}'; is this the codec folder?")
    names = {f.name: f.name for f in fields(WhisperVQConfig)}
    config = _pick(WhisperVQConfig, data, names, path.name)
    problems = []
    if data.get("pooling_type", "avg") != "avg":
        problems.append(f"pooling_type {str(data.get('pooling_type'))[:40]!r} (only 'avg' is "
                        "supported)")
    if not data.get("encoder_causal_attention", True) or not data.get(
            "encoder_causal_convolution", True):
        problems.append("a non-causal encoder (MOSS-Speech's tokenizer is causal)")
    if config.pooling_position > config.quantize_position:
        problems.append("pooling_position after quantize_position")
    if data.get("activation_function", "gelu") != "gelu":
        problems.append(f"activation_function {str(data.get('activation_function'))[:40]!r}")
    if data.get("scale_embedding"):
        problems.append("scale_embedding = true")
    if config.d_model % config.encoder_attention_heads:
        problems.append(f"d_model {config.d_model} is not a multiple of encoder_attention_heads "
                        f"{config.encoder_attention_heads}")
    if problems:
        raise CodecConfigError(f"{path.name}: unsupported tokenizer: " + "; ".join(problems))
    return config


def read_flow_yaml(path: Path) -> tuple[FlowConfig, HiFTConfig]:
    """Flow and HiFT hyper-parameters from flow/config.yaml (HyperPyYAML or plain YAML)."""
    try:
        tree = load_flow_yaml(path)
        flow_raw = find_section(tree, "flow", "CausalMaskedDiffWithXvec")
        hift_raw = find_section(tree, "hift", "HiFTGenerator")
    except FileNotFoundError as exc:
        raise CodecConfigError("flow/config.yaml: missing") from exc
    except UnicodeDecodeError as exc:
        raise CodecConfigError("flow/config.yaml: not a text file (not UTF-8)") from exc
    except (OSError, ValueError) as exc:  # YamlError, or BoundsError for a huge file
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise CodecConfigError(f"flow/config.yaml: {detail}") from exc
    return _flow_from(flow_raw), _hift_from(hift_raw)


def _section(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    return value if isinstance(value, dict) else {}


def _flow_from(raw: Mapping[str, Any]) -> FlowConfig:
    where = "flow/config.yaml (flow)"
    enc_raw, dec_raw = _section(raw, "encoder"), _section(raw, "decoder")
    est_raw = _section(dec_raw, "estimator")
    cfm_raw = _section(dec_raw, "cfm_params")
    cfm_raw = _section(cfm_raw, "content") or cfm_raw  # omegaconf DictConfig wraps `content`
    encoder = _pick(FlowEncoderConfig, {**enc_raw, "pre_lookahead_len": raw.get(
        "pre_lookahead_len")}, {f.name: f.name for f in fields(FlowEncoderConfig)}, where)
    if enc_raw.get("input_size") is None and raw.get("input_size") is not None:
        outer = _pick(FlowEncoderConfig, raw, {"input_size": "input_size"}, where)
        encoder = replace(encoder, input_size=outer.input_size)
    estimator = _pick(EstimatorConfig, est_raw,
                      {f.name: f.name for f in fields(EstimatorConfig)}, where)
    flow = _pick(FlowConfig, {**raw, "mel_bins": raw.get("output_size"),
                              "inference_cfg_rate": cfm_raw.get("inference_cfg_rate")},
                 {"vocab_size": "vocab_size", "mel_bins": "mel_bins",
                  "spk_embed_dim": "spk_embed_dim", "token_mel_ratio": "token_mel_ratio",
                  "inference_cfg_rate": "inference_cfg_rate"}, where)
    flow = replace(flow, encoder=encoder, estimator=estimator)
    problems = []
    if enc_raw.get("use_cnn_module") or enc_raw.get("macaron_style"):
        problems.append("conformer convolution/macaron modules (the MOSS flow has none)")
    if str(cfm_raw.get("t_scheduler", "cosine")) != "cosine":
        problems.append(f"t_scheduler {str(cfm_raw.get('t_scheduler'))[:40]!r}")
    problems += _flow_shape_problems(flow)
    if problems:
        raise CodecConfigError(f"{where}: unsupported: " + "; ".join(problems))
    return flow


def _flow_shape_problems(flow: FlowConfig) -> list[str]:
    """Sizes the flow networks cannot be built with (or would fail with at the first reply)."""
    found = []
    if flow.estimator.in_channels != 4 * flow.mel_bins:
        found.append(f"estimator in_channels {flow.estimator.in_channels} != 4 × mel bins")
    if flow.estimator.out_channels != flow.mel_bins:
        found.append(f"estimator out_channels {flow.estimator.out_channels} != mel bins "
                     f"{flow.mel_bins}")
    if len(flow.estimator.channels) != 1:
        found.append("a multi-level estimator (channels must be one number, [C])")
    if flow.encoder.output_size % flow.encoder.attention_heads:
        found.append(f"encoder output_size {flow.encoder.output_size} is not a multiple of "
                     f"attention_heads {flow.encoder.attention_heads}")
    return found


def _hift_from(raw: Mapping[str, Any]) -> HiFTConfig:
    where = "flow/config.yaml (hift)"
    istft, f0 = _section(raw, "istft_params"), _section(raw, "f0_predictor")
    merged = {**raw, "istft_n_fft": istft.get("n_fft"), "istft_hop": istft.get("hop_len"),
              "f0_cond_channels": f0.get("cond_channels")}
    hift = _pick(HiFTConfig, merged, {f.name: f.name for f in fields(HiFTConfig)}, where)
    problems = []
    if len(hift.upsample_rates) != len(hift.upsample_kernel_sizes):
        problems.append("upsample_rates and upsample_kernel_sizes differ in length")
    elif any(k < u for u, k in zip(hift.upsample_rates, hift.upsample_kernel_sizes, strict=True)):
        problems.append("an upsample kernel is shorter than its rate")
    if len(hift.resblock_kernel_sizes) != len(hift.resblock_dilation_sizes):
        problems.append("resblock_kernel_sizes and resblock_dilation_sizes differ in length")
    if hift.base_channels % (1 << len(hift.upsample_rates)):
        problems.append(f"base_channels {hift.base_channels} cannot be halved "
                        f"{len(hift.upsample_rates)} times")
    if problems:
        raise CodecConfigError(f"{where}: unsupported: " + "; ".join(problems))
    return hift


def read_codec_config(folder: Path) -> CodecConfig:
    """All codec settings from a codec folder; raises CodecConfigError naming the file."""
    flow, hift = read_flow_yaml(folder / "flow" / "config.yaml")
    config = CodecConfig(front_end=read_front_end(folder / "preprocessor_config.json"),
                         whisper=read_whisper(folder / "config.json"), flow=flow, hift=hift)
    if config.whisper.num_mel_bins != config.front_end.n_mels:
        raise CodecConfigError(f"config.json num_mel_bins {config.whisper.num_mel_bins} != "
                               f"preprocessor_config.json feature_size {config.front_end.n_mels}")
    if config.hift.in_channels != config.flow.mel_bins:
        raise CodecConfigError(f"flow/config.yaml: hift in_channels {config.hift.in_channels} "
                               f"!= flow output_size {config.flow.mel_bins}")
    return config

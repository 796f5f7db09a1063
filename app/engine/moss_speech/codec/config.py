"""Codec configuration, read from the published folder (config.json, preprocessor_config.json,
flow/config.yaml), with the full-size and tiny presets used by tests and benchmarks.

The flow YAML upstream is a HyperPyYAML file (``!new:``/``!ref`` tags); we read it with a
tolerant safe loader that never imports or runs anything, and fall back to the published values
(contract §3.4/§3.5) for fields it does not state. Shapes are checked again when weights load.
"""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

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


def _read_json(path: Path) -> dict[str, Any]:
    return load_json(path, "; download the codec again", CodecConfigError)


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
            if expected is tuple:
                values[field_name] = _as_tuple(value)
            elif expected is bool:
                values[field_name] = bool(value)
            else:
                values[field_name] = expected(value)
        except (TypeError, ValueError) as exc:
            raise CodecConfigError(f"{where}: '{key}' = {value!r} is not a valid "
                                   f"{expected.__name__}") from exc
    return replace(defaults, **values)


def _as_tuple(value: Any) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise TypeError("not a list")
    return tuple(_as_tuple(v) if isinstance(v, (list, tuple)) else int(v) for v in value)


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
    fields = WhisperVQConfig.__dataclass_fields__
    config = _pick(WhisperVQConfig, data, {name: name for name in fields}, path.name)
    problems = []
    if data.get("pooling_type", "avg") != "avg":
        problems.append(f"pooling_type {data.get('pooling_type')!r} (only 'avg' is supported)")
    if not data.get("encoder_causal_attention", True) or not data.get(
            "encoder_causal_convolution", True):
        problems.append("a non-causal encoder (MOSS-Speech's tokenizer is causal)")
    if config.pooling_position > config.quantize_position:
        problems.append("pooling_position after quantize_position")
    if data.get("activation_function", "gelu") != "gelu":
        problems.append(f"activation_function {data.get('activation_function')!r}")
    if data.get("scale_embedding"):
        problems.append("scale_embedding = true")
    if problems:
        raise CodecConfigError(f"{path.name}: unsupported tokenizer: " + "; ".join(problems))
    return config


class _TaggedLoader(yaml.SafeLoader):
    """SafeLoader that reads HyperPyYAML tags as plain data (nothing is imported or called)."""


class _Ref(str):
    """A ``!ref`` expression such as ``<chunk_size> * <token_mel_ratio>``, resolved later."""


def _construct_tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if suffix.startswith("ref"):
        return _Ref(loader.construct_scalar(node))
    if isinstance(node, yaml.MappingNode):
        data = loader.construct_mapping(node, deep=True)
        return {**data, "_class": suffix.split(":", 1)[-1]}
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return {"_class": suffix.split(":", 1)[-1], "_value": loader.construct_scalar(node)}


_TaggedLoader.add_multi_constructor("!", _construct_tagged)

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv}


def _eval_arith(expr: str) -> float:
    def walk(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError(f"unsupported expression {expr!r}")

    return walk(ast.parse(expr, mode="eval"))


def _resolve(value: Any, top: Mapping[str, Any], depth: int = 0) -> Any:
    if depth > 20:
        raise CodecConfigError("flow/config.yaml: circular !ref")
    if isinstance(value, _Ref):
        names = re.findall(r"<([^<>]+)>", value)
        if len(names) == 1 and value.strip() == f"<{names[0]}>":
            return _resolve(top.get(names[0]), top, depth + 1)
        expr = str(value)
        for name in names:
            resolved = _resolve(top.get(name), top, depth + 1)
            if not isinstance(resolved, (int, float)):
                return None  # a reference to something that is not a number: not needed here
            expr = expr.replace(f"<{name}>", repr(resolved))
        try:
            result = _eval_arith(expr)
        except (ValueError, SyntaxError, ZeroDivisionError):
            return None
        return int(result) if float(result).is_integer() else result
    if isinstance(value, dict):
        return {k: _resolve(v, top, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, top, depth + 1) for v in value]
    return value


def _find_section(tree: Any, key: str, class_suffix: str) -> dict[str, Any]:
    """The mapping stored under ``key`` or tagged with a class ending in ``class_suffix``."""
    if isinstance(tree, dict):
        if str(tree.get("_class", "")).endswith(class_suffix):
            return tree
        if isinstance(tree.get(key), dict):
            return tree[key]
        for value in tree.values():
            found = _find_section(value, key, class_suffix)
            if found:
                return found
    elif isinstance(tree, list):
        for value in tree:
            found = _find_section(value, key, class_suffix)
            if found:
                return found
    return {}


def read_flow_yaml(path: Path) -> tuple[FlowConfig, HiFTConfig]:
    """Flow and HiFT hyper-parameters from flow/config.yaml (HyperPyYAML or plain YAML)."""
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=_TaggedLoader)
    except FileNotFoundError as exc:
        raise CodecConfigError("flow/config.yaml: missing; download the codec again") from exc
    except (OSError, yaml.YAMLError) as exc:
        raise CodecConfigError(f"flow/config.yaml: not readable YAML ({exc})") from exc
    if not isinstance(raw, dict):
        raise CodecConfigError("flow/config.yaml: not a YAML mapping")
    tree = _resolve(raw, raw)
    flow_raw = _find_section(tree, "flow", "CausalMaskedDiffWithXvec")
    hift_raw = _find_section(tree, "hift", "HiFTGenerator")
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
        "pre_lookahead_len")}, {n: n for n in FlowEncoderConfig.__dataclass_fields__}, where)
    if enc_raw.get("input_size") is None and raw.get("input_size") is not None:
        encoder = replace(encoder, input_size=int(raw["input_size"]))
    estimator = _pick(EstimatorConfig, est_raw,
                      {n: n for n in EstimatorConfig.__dataclass_fields__}, where)
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
        problems.append(f"t_scheduler {cfm_raw.get('t_scheduler')!r}")
    if flow.estimator.in_channels != 4 * flow.mel_bins:
        problems.append(f"estimator in_channels {flow.estimator.in_channels} != 4 × mel bins")
    if problems:
        raise CodecConfigError(f"{where}: unsupported: " + "; ".join(problems))
    return flow


def _hift_from(raw: Mapping[str, Any]) -> HiFTConfig:
    where = "flow/config.yaml (hift)"
    istft, f0 = _section(raw, "istft_params"), _section(raw, "f0_predictor")
    merged = {**raw, "istft_n_fft": istft.get("n_fft"), "istft_hop": istft.get("hop_len"),
              "f0_cond_channels": f0.get("cond_channels")}
    return _pick(HiFTConfig, merged, {n: n for n in HiFTConfig.__dataclass_fields__}, where)


def read_codec_config(folder: Path) -> CodecConfig:
    """All codec settings from a codec folder; raises CodecConfigError naming the file."""
    flow, hift = read_flow_yaml(folder / "flow" / "config.yaml")
    config = CodecConfig(front_end=read_front_end(folder / "preprocessor_config.json"),
                         whisper=read_whisper(folder / "config.json"), flow=flow, hift=hift)
    if config.whisper.num_mel_bins != config.front_end.n_mels:
        raise CodecConfigError(f"config.json num_mel_bins {config.whisper.num_mel_bins} != "
                               f"preprocessor_config.json feature_size {config.front_end.n_mels}")
    return config

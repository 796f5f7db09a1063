"""Random-weight codecs for tests, benchmarks and the self-test.

``write_tiny_codec(folder, seed)`` writes a complete codec folder in the published layout (same
file names, same checkpoint key names, HyperPyYAML flow config, weight-normed HiFT, chunk
checkpoints with epoch/step counters) at the tiny sizes of contract §7, plus a stand-in CAM++
ONNX model. ``build_random_codec(config)`` makes a codec of any size in memory (the benchmark's
``--size full``). Weights are drawn from a seeded generator; the global RNG is not touched.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn

from app.engine.moss_speech.codec.codec import MossSpeechCodec
from app.engine.moss_speech.codec.config import CodecConfig
from app.engine.moss_speech.codec.flow import Flow
from app.engine.moss_speech.codec.hift import HiFTGenerator, Snake
from app.engine.moss_speech.codec.onnx_writer import speaker_model_bytes
from app.engine.moss_speech.codec.voice import SpeakerEmbedder
from app.engine.moss_speech.codec.whisper_vq import WhisperVQEncoder

TINY_F0_HZ = 150.0  # the tiny F0 predictor's bias: voiced, so the source is harmonic


def speech_like(seconds: float, rate: int, seed: int = 0, f0_hz: float = 140.0) -> np.ndarray:
    """A voiced, syllable-modulated harmonic signal with a little noise: [T] float32."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    pitch = f0_hz * (1 + 0.05 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voiced = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3.1 * t) ** 2
    return (0.2 * voiced * envelope + 0.005 * rng.standard_normal(len(t))).astype(np.float32)


def randomize_(module: nn.Module, generator: torch.Generator, gain: float = 1.0) -> nn.Module:
    """Fill every parameter from ``generator``: norms 1/0, biases 0, Snake α 1, weights
    N(0, gain/√fan_in); embeddings N(0, 1)."""
    with torch.no_grad():
        for name, param in module.named_parameters():
            owner = module.get_submodule(name.rsplit(".", 1)[0]) if "." in name else module
            if isinstance(owner, nn.LayerNorm):
                param.fill_(1.0 if name.endswith("weight") else 0.0)
            elif isinstance(owner, Snake) or name.endswith("bias"):
                param.fill_(1.0 if isinstance(owner, Snake) else 0.0)
            else:
                fan_in = param[0].numel() if param.ndim > 1 else param.numel()
                std = 1.0 if isinstance(owner, nn.Embedding) else gain / math.sqrt(fan_in)
                param.copy_(torch.randn(param.shape, generator=generator) * std)
    return module


def _materialize(module: nn.Module) -> nn.Module:
    """Allocate a meta-built module on the CPU (contents are filled by randomize_)."""
    module.to_empty(device="cpu")
    for child in module.modules():
        reset = getattr(child, "reset_buffers", None)
        if callable(reset):
            reset()
    return module


def random_modules(config: CodecConfig, seed: int = 0, chunks: tuple[int, ...] = (5, 25),
                   offline_flow: bool = True
                   ) -> tuple[WhisperVQEncoder, dict[int, Flow], HiFTGenerator]:
    """Randomly initialised tokenizer, flows (0 = offline unless left out, then each chunk
    size) and HiFT."""
    generator = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        encoder = WhisperVQEncoder(config.whisper)
        flows = {chunk: Flow(config.flow, chunk=chunk)
                 for chunk in ((0,) if offline_flow else ()) + tuple(chunks)}
        hift = HiFTGenerator(config.hift)
    randomize_(_materialize(encoder), generator)
    for flow in flows.values():
        randomize_(_materialize(flow), generator)
    randomize_(_materialize(hift), generator, gain=0.5)
    with torch.no_grad():
        hift.f0_predictor.classifier.bias.fill_(TINY_F0_HZ)
        hift.conv_post.weight.mul_(0.1)  # keep exp(magnitude) moderate
    for module in (encoder, *flows.values(), hift):
        module.eval().requires_grad_(False)
    return encoder, flows, hift


def _speaker_weights(config: CodecConfig, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    weight = (rng.standard_normal((80, config.flow.spk_embed_dim)) * 0.05).astype(np.float32)
    bias = (rng.standard_normal(config.flow.spk_embed_dim) * 0.1).astype(np.float32)
    return weight, bias


def tiny_speaker_model(config: CodecConfig, seed: int = 0) -> bytes:
    return speaker_model_bytes(*_speaker_weights(config, seed))


def build_random_codec(config: CodecConfig, device: torch.device | str = "cpu",
                       dtype: torch.dtype = torch.float32, seed: int = 0,
                       chunks: tuple[int, ...] = (5,), voice_cache_dir: Path | None = None,
                       offline_flow: bool = True) -> MossSpeechCodec:
    """An in-memory codec with random weights at any size (the CAM++ stand-in is tiny);
    ``offline_flow=False`` leaves out flow.pt's twin, as the engine does."""

    encoder, flows, hift = random_modules(config, seed, chunks, offline_flow)
    encoder.to(device=device, dtype=dtype)
    for flow in flows.values():
        flow.to(device=device, dtype=dtype)
    hift.to(device=device)

    def flow_loader(chunk: int) -> Flow:
        if chunk not in flows:
            raise ValueError(f"this random codec has no {chunk}-code chunk flow")
        return flows[chunk]

    return MossSpeechCodec(config, encoder, hift, SpeakerEmbedder(tiny_speaker_model(config, seed)),
                           flow_loader=flow_loader, fingerprint=f"random-{seed}",
                           voice_cache_dir=voice_cache_dir)


def _whisper_json(config: CodecConfig) -> dict:
    w = config.whisper
    return {"architectures": ["WhisperVQEncoder"], "model_type": "whisper", "d_model": w.d_model,
            "encoder_layers": w.quantize_position + 1, "decoder_layers": 1,
            "encoder_attention_heads": w.encoder_attention_heads,
            "encoder_ffn_dim": w.encoder_ffn_dim, "num_mel_bins": w.num_mel_bins,
            "max_source_positions": w.max_source_positions, "activation_function": "gelu",
            "scale_embedding": False, "pooling_kernel_size": w.pooling_kernel_size,
            "pooling_type": "avg", "pooling_position": w.pooling_position,
            "quantize_position": w.quantize_position,
            "quantize_vocab_size": w.quantize_vocab_size, "quantize_encoder_only": False,
            "encoder_causal_attention": True, "encoder_causal_convolution": True}


def _preprocessor_json(config: CodecConfig) -> dict:
    fe = config.front_end
    return {"feature_extractor_type": "WhisperFeatureExtractor", "feature_size": fe.n_mels,
            "sampling_rate": fe.sample_rate_hz, "hop_length": fe.hop_length, "n_fft": fe.n_fft,
            "chunk_length": fe.segment_s, "n_samples": fe.segment_s * fe.sample_rate_hz,
            "nb_max_frames": fe.segment_s * fe.sample_rate_hz // fe.hop_length,
            "padding_side": "right", "padding_value": 0.0, "return_attention_mask": False}


def _flow_yaml(config: CodecConfig) -> str:
    """A HyperPyYAML file in the CosyVoice2 style (tags and references included)."""
    f, h = config.flow, config.hift
    return f"""# tiny random codec for tests (moss-voice); layout of CosyVoice2's cosyvoice2.yaml
sample_rate: {h.sampling_rate}
token_frame_rate: 25
token_mel_ratio: {f.token_mel_ratio}
chunk_size: 25
spk_embed_dim: {f.spk_embed_dim}

""" + _flow_section(config) + "\n" + _hift_section(config)


def _flow_section(config: CodecConfig) -> str:
    f, e, d = config.flow, config.flow.encoder, config.flow.estimator
    return f"""flow: !new:cosyvoice.flow.flow.CausalMaskedDiffWithXvec
    input_size: {e.input_size}
    output_size: {f.mel_bins}
    spk_embed_dim: !ref <spk_embed_dim>
    output_type: 'mel'
    vocab_size: {f.vocab_size}
    input_frame_rate: !ref <token_frame_rate>
    only_mask_loss: True
    token_mel_ratio: !ref <token_mel_ratio>
    pre_lookahead_len: {e.pre_lookahead_len}
    encoder: !new:cosyvoice.transformer.upsample_encoder.UpsampleConformerEncoder
        output_size: {e.output_size}
        attention_heads: {e.attention_heads}
        linear_units: {e.linear_units}
        num_blocks: {e.num_blocks}
        num_up_blocks: {e.num_up_blocks}
        upsample_stride: {e.upsample_stride}
        dropout_rate: 0.1
        normalize_before: True
        input_layer: 'linear'
        pos_enc_layer_type: 'rel_pos_espnet'
        selfattention_layer_type: 'rel_selfattn'
        input_size: {e.input_size}
        use_cnn_module: False
        macaron_style: False
        static_chunk_size: !ref <chunk_size>
    decoder: !new:cosyvoice.flow.flow_matching.CausalConditionalCFM
        in_channels: 240
        n_spks: 1
        spk_emb_dim: 80
        cfm_params: !new:omegaconf.DictConfig
            content:
                sigma_min: 1e-06
                solver: 'euler'
                t_scheduler: 'cosine'
                training_cfg_rate: 0.2
                inference_cfg_rate: {f.inference_cfg_rate}
                reg_loss_type: 'l1'
        estimator: !new:cosyvoice.flow.decoder.CausalConditionalDecoder
            in_channels: {d.in_channels}
            out_channels: {d.out_channels}
            channels: {list(d.channels)}
            dropout: 0.0
            attention_head_dim: {d.attention_head_dim}
            n_blocks: {d.n_blocks}
            num_mid_blocks: {d.num_mid_blocks}
            num_heads: {d.num_heads}
            act_fn: 'gelu'
            static_chunk_size: !ref <chunk_size> * <token_mel_ratio>
            num_decoding_left_chunks: -1
"""


def _hift_section(config: CodecConfig) -> str:
    h = config.hift
    dil = json.dumps([list(x) for x in h.resblock_dilation_sizes])
    src_dil = json.dumps([list(x) for x in h.source_resblock_dilation_sizes])
    return f"""hift: !new:cosyvoice.hifigan.generator.HiFTGenerator
    in_channels: {h.in_channels}
    base_channels: {h.base_channels}
    nb_harmonics: {h.nb_harmonics}
    sampling_rate: !ref <sample_rate>
    nsf_alpha: {h.nsf_alpha}
    nsf_sigma: {h.nsf_sigma}
    nsf_voiced_threshold: {h.nsf_voiced_threshold}
    upsample_rates: {list(h.upsample_rates)}
    upsample_kernel_sizes: {list(h.upsample_kernel_sizes)}
    istft_params:
        n_fft: {h.istft_n_fft}
        hop_len: {h.istft_hop}
    resblock_kernel_sizes: {list(h.resblock_kernel_sizes)}
    resblock_dilation_sizes: {dil}
    source_resblock_kernel_sizes: {list(h.source_resblock_kernel_sizes)}
    source_resblock_dilation_sizes: {src_dil}
    lrelu_slope: {h.lrelu_slope}
    audio_limit: {h.audio_limit}
    f0_predictor: !new:cosyvoice.hifigan.f0_predictor.ConvRNNF0Predictor
        num_class: 1
        in_channels: {h.in_channels}
        cond_channels: {h.f0_cond_channels}
"""


def _weight_normed(state: dict[str, torch.Tensor], hift: HiFTGenerator) -> dict[str, torch.Tensor]:
    """HiFT state dict with the convolutions split into weight-norm (g, v) pairs, as in hift.pt
    (source_downs and the linear layers are plain in the reference)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        module_name = key.rsplit(".", 1)[0]
        module = hift.get_submodule(module_name)
        normed = (isinstance(module, (nn.Conv1d, nn.ConvTranspose1d))
                  and not module_name.startswith("source_downs") and key.endswith(".weight"))
        if normed:
            g = value.norm(2, dim=tuple(range(1, value.ndim)), keepdim=True)
            out[f"{module_name}.parametrizations.weight.original0"] = g
            out[f"{module_name}.parametrizations.weight.original1"] = value.clone()
        else:
            out[key] = value.clone()
    return out


def write_tiny_codec(folder: Path | str, seed: int = 0) -> Path:
    """Write a tiny random codec folder in the published layout; returns the folder."""
    folder = Path(folder)
    (folder / "flow").mkdir(parents=True, exist_ok=True)
    config = CodecConfig.tiny()
    encoder, flows, hift = random_modules(config, seed, chunks=(5, 25))
    (folder / "config.json").write_text(json.dumps(_whisper_json(config), indent=2),
                                         encoding="utf-8")
    (folder / "preprocessor_config.json").write_text(json.dumps(_preprocessor_json(config),
                                                                indent=2), encoding="utf-8")
    tensors = {f"encoder.{k}": v.contiguous() for k, v in encoder.state_dict().items()}
    d = config.whisper.d_model  # extra keys the real file has and the loader must skip
    tensors["encoder.layer_norm.weight"] = torch.ones(d)
    tensors["encoder.embed_positions2.weight"] = torch.zeros(375, d)
    tensors["decoder.embed_tokens.weight"] = torch.zeros(8, d)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "flow" / "config.yaml").write_text(_flow_yaml(config), encoding="utf-8")
    torch.save(flows[0].state_dict(), folder / "flow" / "flow.pt")
    for chunk in (5, 25):
        state: dict = dict(flows[chunk].state_dict())
        state.update(epoch=7, step=1234)  # the chunk checkpoints carry training counters
        torch.save(state, folder / "flow" / f"flow-chunk-{chunk}.pt")
    torch.save(_weight_normed(hift.state_dict(), hift), folder / "flow" / "hift.pt")
    (folder / "flow" / "campplus.onnx").write_bytes(tiny_speaker_model(config, seed))
    return folder

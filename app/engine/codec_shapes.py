"""Every checkpoint key of the codec networks and its shape, from the codec config, torch-free.

Folder verification compares these with the tensors the files declare (safetensors header,
torch checkpoint pickle) without building the networks. The key names and shapes are those of
``state_dict()`` of the modules in :mod:`app.engine.moss_speech.codec` (tests compare the two
for the tiny, full and other configs, so they cannot drift apart).
"""

from __future__ import annotations

from app.engine.codec_config import (
    CodecConfig,
    EstimatorConfig,
    FlowConfig,
    FlowEncoderConfig,
    HiFTConfig,
    WhisperVQConfig,
)

Shapes = dict[str, tuple[int, ...]]


def _linear(out: dict, name: str, n_in: int, n_out: int, bias: bool = True) -> None:
    out[f"{name}.weight"] = (n_out, n_in)
    if bias:
        out[f"{name}.bias"] = (n_out,)


def _conv(out: dict, name: str, n_in: int, n_out: int, kernel: int) -> None:
    out[f"{name}.weight"] = (n_out, n_in, kernel)
    out[f"{name}.bias"] = (n_out,)


def _norm(out: dict, name: str, dim: int) -> None:
    out[f"{name}.weight"] = (dim,)
    out[f"{name}.bias"] = (dim,)


def whisper_shapes(config: WhisperVQConfig) -> Shapes:
    """WhisperVQEncoder: the layers below quantize_position and the codebook."""
    d = config.d_model
    out: Shapes = {}
    _conv(out, "conv1", config.num_mel_bins, d, 3)
    _conv(out, "conv2", d, d, 3)
    out["embed_positions.weight"] = (config.max_source_positions, d)
    for i in range(config.quantize_position):
        layer = f"layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            _linear(out, f"{layer}.self_attn.{proj}", d, d, bias=proj != "k_proj")
        _norm(out, f"{layer}.self_attn_layer_norm", d)
        _linear(out, f"{layer}.fc1", d, config.encoder_ffn_dim)
        _linear(out, f"{layer}.fc2", config.encoder_ffn_dim, d)
        _norm(out, f"{layer}.final_layer_norm", d)
    out["codebook.weight"] = (config.quantize_vocab_size, d)
    return out


def _conformer(out: dict, name: str, d: int, heads: int, hidden: int) -> None:
    for proj in ("linear_q", "linear_k", "linear_v", "linear_out"):
        _linear(out, f"{name}.self_attn.{proj}", d, d)
    _linear(out, f"{name}.self_attn.linear_pos", d, d, bias=False)
    out[f"{name}.self_attn.pos_bias_u"] = (heads, d // heads)
    out[f"{name}.self_attn.pos_bias_v"] = (heads, d // heads)
    _linear(out, f"{name}.feed_forward.w_1", d, hidden)
    _linear(out, f"{name}.feed_forward.w_2", hidden, d)
    _norm(out, f"{name}.norm_mha", d)
    _norm(out, f"{name}.norm_ff", d)


def _encoder(out: dict, config: FlowEncoderConfig) -> None:
    d = config.output_size
    _linear(out, "encoder.embed.out.0", config.input_size, d)
    _norm(out, "encoder.embed.out.1", d)
    _conv(out, "encoder.pre_lookahead_layer.conv1", d, d, config.pre_lookahead_len + 1)
    _conv(out, "encoder.pre_lookahead_layer.conv2", d, d, 3)
    for i in range(config.num_blocks):
        _conformer(out, f"encoder.encoders.{i}", d, config.attention_heads, config.linear_units)
    _conv(out, "encoder.up_layer.conv", d, d, 2 * config.upsample_stride + 1)
    _linear(out, "encoder.up_embed.out.0", d, d)
    _norm(out, "encoder.up_embed.out.1", d)
    for i in range(config.num_up_blocks):
        _conformer(out, f"encoder.up_encoders.{i}", d, config.attention_heads,
                   config.linear_units)
    _norm(out, "encoder.after_norm", d)


def _resnet(out: dict, name: str, dim: int, dim_out: int, time_dim: int) -> None:
    _linear(out, f"{name}.mlp.1", time_dim, dim_out)
    _conv(out, f"{name}.block1.block.0", dim, dim_out, 3)
    _norm(out, f"{name}.block1.block.2", dim_out)
    _conv(out, f"{name}.block2.block.0", dim_out, dim_out, 3)
    _norm(out, f"{name}.block2.block.2", dim_out)
    _conv(out, f"{name}.res_conv", dim, dim_out, 1)


def _transformers(out: dict, name: str, c: int, config: EstimatorConfig) -> None:
    inner = config.num_heads * config.attention_head_dim
    for j in range(config.n_blocks):
        block = f"{name}.{j}"
        _norm(out, f"{block}.norm1", c)
        for proj in ("to_q", "to_k", "to_v"):
            _linear(out, f"{block}.attn1.{proj}", c, inner, bias=False)
        _linear(out, f"{block}.attn1.to_out.0", inner, c)
        _norm(out, f"{block}.norm3", c)
        _linear(out, f"{block}.ff.net.0.proj", c, 4 * c)
        _linear(out, f"{block}.ff.net.2", 4 * c, c)


def _estimator(out: dict, config: EstimatorConfig, prefix: str = "decoder.estimator") -> None:
    c = config.channels[0]
    time_dim = 4 * c
    _linear(out, f"{prefix}.time_mlp.linear_1", config.in_channels, time_dim)
    _linear(out, f"{prefix}.time_mlp.linear_2", time_dim, time_dim)
    _resnet(out, f"{prefix}.down_blocks.0.0", config.in_channels, c, time_dim)
    _transformers(out, f"{prefix}.down_blocks.0.1", c, config)
    _conv(out, f"{prefix}.down_blocks.0.2", c, c, 3)
    for m in range(config.num_mid_blocks):
        _resnet(out, f"{prefix}.mid_blocks.{m}.0", c, c, time_dim)
        _transformers(out, f"{prefix}.mid_blocks.{m}.1", c, config)
    _resnet(out, f"{prefix}.up_blocks.0.0", 2 * c, c, time_dim)
    _transformers(out, f"{prefix}.up_blocks.0.1", c, config)
    _conv(out, f"{prefix}.up_blocks.0.2", c, c, 3)
    _conv(out, f"{prefix}.final_block.block.0", c, c, 3)
    _norm(out, f"{prefix}.final_block.block.2", c)
    _conv(out, f"{prefix}.final_proj", c, config.out_channels, 1)


def flow_shapes(config: FlowConfig) -> Shapes:
    """Flow (any chunk size: the chunk changes the attention masks, not the weights)."""
    out: Shapes = {"input_embedding.weight": (config.vocab_size, config.encoder.input_size)}
    _linear(out, "spk_embed_affine_layer", config.spk_embed_dim, config.mel_bins)
    _encoder(out, config.encoder)
    _linear(out, "encoder_proj", config.encoder.output_size, config.mel_bins)
    _estimator(out, config.estimator)
    return out


def _resblock(out: dict, name: str, channels: int, kernel: int,
              dilations: tuple[int, ...]) -> None:
    for j in range(len(dilations)):
        _conv(out, f"{name}.convs1.{j}", channels, channels, kernel)
        _conv(out, f"{name}.convs2.{j}", channels, channels, kernel)
        out[f"{name}.activations1.{j}.alpha"] = (channels,)
        out[f"{name}.activations2.{j}.alpha"] = (channels,)


def source_down_rates(rates: tuple[int, ...]) -> list[int]:
    """HiFT's source downsampling per level: cumprod([1, *reversed(rates)[:-1]]) reversed."""
    products = [1]
    for rate in rates[::-1][:-1]:
        products.append(products[-1] * rate)
    return products[::-1]


def hift_shapes(config: HiFTConfig) -> Shapes:
    """HiFTGenerator after weight norm is folded (``weight`` where the file has g and v)."""
    base, n_freq = config.base_channels, config.istft_n_fft + 2
    out: Shapes = {}
    cond = config.f0_cond_channels
    for index in range(5):
        _conv(out, f"f0_predictor.condnet.{2 * index}", config.in_channels if index == 0 else cond,
              cond, 3)
    _linear(out, "f0_predictor.classifier", cond, 1)
    _linear(out, "m_source.l_linear", config.nb_harmonics + 1, 1)
    _conv(out, "conv_pre", config.in_channels, base, 7)
    for i, kernel in enumerate(config.upsample_kernel_sizes):
        # ConvTranspose1d keeps its weight as [in, out, kernel]
        out[f"ups.{i}.weight"] = (base // 2 ** i, base // 2 ** (i + 1), kernel)
        out[f"ups.{i}.bias"] = (base // 2 ** (i + 1),)
    levels = zip(source_down_rates(config.upsample_rates), config.source_resblock_kernel_sizes,
                 config.source_resblock_dilation_sizes, strict=False)
    for i, (rate, kernel, dilations) in enumerate(levels):
        channels = base // 2 ** (i + 1)
        _conv(out, f"source_downs.{i}", n_freq, channels, 1 if rate == 1 else 2 * rate)
        _resblock(out, f"source_resblocks.{i}", channels, kernel, dilations)
    per_level = list(zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes,
                         strict=True))
    for i in range(len(config.upsample_rates)):
        for j, (kernel, dilations) in enumerate(per_level):
            _resblock(out, f"resblocks.{i * len(per_level) + j}", base // 2 ** (i + 1), kernel,
                      dilations)
    _conv(out, "conv_post", base // 2 ** len(config.upsample_rates), n_freq, 7)
    return out


def codec_shapes(config: CodecConfig) -> dict[str, Shapes]:
    """Expected shapes by file: the tokenizer (model.safetensors, without its prefix), each flow
    checkpoint and hift.pt."""
    flow = flow_shapes(config.flow)
    return {"model.safetensors": whisper_shapes(config.whisper), "flow/flow.pt": flow,
            "flow/flow-chunk-5.pt": flow, "flow/flow-chunk-25.pt": flow,
            "flow/hift.pt": hift_shapes(config.hift)}

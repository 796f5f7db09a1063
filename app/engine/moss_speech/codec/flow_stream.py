"""The flow chunk by chunk with caches (contract §3.7), in a memory bound.

Attention is chunk-causal and every convolution causal, so the keys/values and convolution
tails of finished chunks never change: each step keeps them (per Euler step, for both CFG
branches) and computes only the new chunk. The output equals the reference's whole-prefix
recompute (tests).

Memory. The estimator's state is what counts: keys and values of 56 attention blocks × 2 CFG
branches × 10 Euler steps, 4.4 MiB per mel frame (17.5 MiB per code, 220 MiB per second of
prompt + reply) at full size in float32, half in bfloat16; the encoder's is ~0.5 % of that. It
is stored in the flow's compute dtype. When the stream's capacity is known (a budget, or the
longest reply) every buffer is allocated once at that size: no doubling, no copy.

Budget. ``budget_bytes`` bounds the estimator state. When the next step would not fit, the
stream *freezes*: the state of the frames so far is kept read-only, and every later step
recomputes the estimator over the frames after them (attending to the frozen keys), which is the
reference's recompute restricted to the part that no longer fits. Nothing changes in the output
(tests compare it with the whole-prefix recompute); the memory stays at the budget, and a step
then costs the frames since the freeze instead of one chunk. The encoder state and the encoder
output of those frames (the CFM's ``mu``) stay cached: they are small, and keep the encoder's
quadratic relative-position attention out of the recompute.

Voice prefix. ``voice_prefix`` computes the prompt chunks that no reply code can change once per
voice. A reply *borrows* that state: it appends after it, in the same buffers (allocated for the
whole reply), so the prefix costs no memory beyond the reply's own bound; at most one reply
borrows at a time (a second one copies).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import torch
from torch import nn

from app.engine.moss_speech.codec.config import FlowConfig
from app.engine.moss_speech.codec.flow import Flow, check_codes
from app.engine.moss_speech.codec.layers import KVAttention, KVCache, StepCache


def estimator_bytes_per_token(config: FlowConfig, n_timesteps: int, element_size: int) -> int:
    """Bytes of estimator state per code (token_mel_ratio mel frames): keys and values of every
    attention block, for both CFG branches, at each Euler step."""
    est = config.estimator
    blocks = est.n_blocks * (2 + est.num_mid_blocks)  # down, mid…, up
    per_frame = 2 * blocks * est.num_heads * est.attention_head_dim * 2 * element_size
    return per_frame * n_timesteps * config.token_mel_ratio


def encoder_bytes_per_token(config: FlowConfig, element_size: int) -> int:
    """Bytes of encoder state per code: keys and values of the conformer blocks at the code
    rate and of the up-sampled blocks at the mel rate."""
    enc = config.encoder
    per_position = 2 * enc.output_size * element_size
    return per_position * (enc.num_blocks + enc.num_up_blocks * enc.upsample_stride)


@dataclass(frozen=True)
class StreamCapacity:
    """Codes (prompt + reply) the caches of one stream are allocated for; None: not known in
    advance (the buffers grow by doubling)."""

    tokens: int | None  # the longest stream (encoder state)
    estimator_tokens: int | None  # estimator state kept before the stream freezes

    @classmethod
    def plan(cls, flow: Flow, n_prompt: int, n_timesteps: int, budget_bytes: int | None,
             max_codes: int | None) -> StreamCapacity:
        longest = flow.config.noise_frames // flow.config.token_mel_ratio  # the flow's limit
        limit = None if max_codes is None else min(n_prompt + max_codes, longest)
        estimator = limit
        if budget_bytes is not None:
            per_token = estimator_bytes_per_token(flow.config, n_timesteps,
                                                  flow.dtype.itemsize)
            fits = max(0, budget_bytes) // per_token
            estimator = fits if limit is None else min(fits, limit)
        return cls(limit, estimator)


class FlowStream:
    """Chunk-by-chunk flow with caches for one reply: ``advance`` returns the mel of the new
    tokens only. Every call but the last must end on a chunk boundary (counted from the start
    of the voice prompt), which the streaming protocol guarantees.

    ``budget_bytes`` bounds the estimator state (see the module doc), ``max_codes`` (the longest
    reply) lets the caches be allocated once. ``prefix`` (from ``voice_prefix``, made with the
    same bounds) starts the stream after the prompt chunks that do not depend on the reply."""

    def __init__(self, flow: Flow, prompt_codes: torch.Tensor, prompt_feat: torch.Tensor,
                 xvector: torch.Tensor, n_timesteps: int | None = None,
                 prefix: FlowStream | None = None, *, budget_bytes: int | None = None,
                 max_codes: int | None = None) -> None:
        if flow.chunk <= 0:
            raise ValueError("streaming needs a chunk-trained flow (flow-chunk-N.pt)")
        self.flow = flow
        self.prompt_codes = prompt_codes.to(flow.encoder_proj.weight.device)
        self.prompt_feat = prompt_feat
        self.spks = flow.speaker(xvector)
        self.n_timesteps = n_timesteps or flow.config.n_timesteps
        self.capacity = StreamCapacity.plan(flow, len(prompt_codes), self.n_timesteps,
                                            budget_bytes, max_codes)
        self.tokens_done = 0  # prompt + reply tokens whose mel has been produced
        self.frozen_tokens: int | None = None  # estimator state kept up to here (bounded mode)
        self.closed = False
        self._mu_tail: torch.Tensor | None = None  # [1, 80, F] encoder output since the freeze
        self._borrower: weakref.ref[FlowStream] | None = None
        self.encoder_cache, self.estimator_caches = self._new_caches()
        if prefix is not None:
            self._start_from(prefix)

    def _new_caches(self) -> tuple[StepCache, list[StepCache]]:
        """Empty caches whose key/value buffers will be allocated at the planned capacity."""
        encoder, stride = self.flow.encoder, self.flow.config.encoder.upsample_stride
        ratio = self.flow.config.token_mel_ratio
        tokens, estimator_tokens = self.capacity.tokens, self.capacity.estimator_tokens
        encoder_cache: StepCache = {}
        if tokens is not None:
            for blocks, positions in ((encoder.encoders, tokens),
                                      (encoder.up_encoders, tokens * stride)):
                encoder_cache.update({key: KVCache(positions) for key in _attention(blocks)})
        attention = _attention(self.flow.decoder.estimator)
        estimator_caches: list[StepCache] = []
        for _ in range(self.n_timesteps):
            estimator_caches.append({} if estimator_tokens is None else {
                key: KVCache(estimator_tokens * ratio) for key in attention})
        return encoder_cache, estimator_caches

    def _start_from(self, prefix: FlowStream) -> None:
        if (prefix.flow is not self.flow or prefix.n_timesteps != self.n_timesteps
                or prefix.capacity != self.capacity or prefix.frozen_tokens is not None):
            raise ValueError("the voice prefix was made for another flow, step count or "
                             "memory bound")
        exclusive = prefix._lend_to(self)

        def share(cache: StepCache) -> StepCache:
            return {key: (value.lease() if exclusive else value.fork())
                    if isinstance(value, KVCache) else value for key, value in cache.items()}

        self.encoder_cache = share(prefix.encoder_cache)
        self.estimator_caches = [share(c) for c in prefix.estimator_caches]
        self.tokens_done = prefix.tokens_done

    def _lend_to(self, borrower: FlowStream) -> bool:
        """True when ``borrower`` may append into this stream's buffers (no other borrower is
        still open); False: it must copy."""
        current = self._borrower() if self._borrower is not None else None
        if current is not None and not current.closed:
            return False
        self._borrower = weakref.ref(borrower)
        return True

    def close(self) -> None:
        """Release the caches (and a borrowed voice prefix, for the next reply)."""
        self.closed = True
        self.encoder_cache, self.estimator_caches, self._mu_tail = {}, [], None

    @property
    def bounded(self) -> bool:
        """The stream has frozen its estimator state (the budget was reached)."""
        return self.frozen_tokens is not None

    def buffers(self) -> dict[int, int]:
        """Cache buffers this stream can reach: identity -> bytes allocated (shared buffers
        count once when the dicts of several streams are merged)."""
        found: dict[int, int] = {}
        for cache in [self.encoder_cache, *self.estimator_caches]:
            for value in cache.values():
                if isinstance(value, KVCache) and value.buffer_ptr():
                    found[value.buffer_ptr()] = value.nbytes()
                elif isinstance(value, torch.Tensor):
                    found[value.data_ptr()] = value.numel() * value.element_size()
        if self._mu_tail is not None:
            found[self._mu_tail.data_ptr()] = (self._mu_tail.numel()
                                                 * self._mu_tail.element_size())
        return found

    def cache_nbytes(self) -> int:
        """Bytes allocated for this stream's state (including a borrowed voice prefix)."""
        return sum(self.buffers().values())

    def cache_used_nbytes(self) -> int:
        """Bytes of the keys/values of the positions held (what a grown-as-needed cache holds)."""
        return sum(value.used_nbytes() for cache in [self.encoder_cache, *self.estimator_caches]
                   for value in cache.values() if isinstance(value, KVCache))

    @torch.inference_mode()
    def advance(self, codes: torch.Tensor, end: int, finalize: bool) -> torch.Tensor:
        """Mel for reply codes [done, end) — [1, 80, 4·(end − done)], prompt frames dropped.
        ``codes`` holds every reply code known so far; without ``finalize`` the three after
        ``end`` are the lookahead."""
        if self.closed:
            raise RuntimeError("the flow stream is closed")
        check_codes(codes)
        tokens = torch.cat([self.prompt_codes, codes.to(self.prompt_codes.device)])
        return self._run(tokens, len(self.prompt_codes) + end, finalize)

    def _run(self, tokens: torch.Tensor, last: int, finalize: bool) -> torch.Tensor:
        flow, ratio = self.flow, self.flow.config.token_mel_ratio
        lookahead = flow.config.encoder.pre_lookahead_len
        first = self.tokens_done
        if not finalize and (last % flow.chunk or last + lookahead > len(tokens)):
            raise ValueError("a non-final streaming step must end on a chunk boundary and "
                             "have its lookahead codes")
        if last <= first:
            return torch.zeros(1, flow.config.mel_bins, 0, device=tokens.device)
        context = None if finalize else flow.embed(tokens[last:last + lookahead])
        h = flow.encoder(flow.embed(tokens[first:last]), context, flow.chunk, self.encoder_cache)
        mu = flow.encoder_proj(h).transpose(1, 2)  # [1, 80, 4·(last − first)]
        limit = self.capacity.estimator_tokens
        if self.frozen_tokens is None and limit is not None and last > limit:
            self.frozen_tokens = first  # the next state would not fit: bounded from here on
        if self.frozen_tokens is None:
            mel = flow.solve_frames(mu, first * ratio, self.spks, self.prompt_feat, flow.chunk,
                                    self.n_timesteps, self.estimator_caches)
        else:
            since = self.frozen_tokens
            tail = mu if first == since or self._mu_tail is None else torch.cat(
                [self._mu_tail, mu], dim=2)
            self._mu_tail = tail
            frozen = [{key: value.reader() if isinstance(value, KVCache) else value
                       for key, value in cache.items()} for cache in self.estimator_caches]
            mel = flow.solve_frames(tail, since * ratio, self.spks, self.prompt_feat, flow.chunk,
                                    self.n_timesteps, frozen)[:, :, (first - since) * ratio:]
        self.tokens_done = last
        prompt_frames = self.prompt_feat.shape[0]
        return mel[:, :, max(0, prompt_frames - first * ratio):]

    @classmethod
    @torch.inference_mode()
    def voice_prefix(cls, flow: Flow, prompt_codes: torch.Tensor, prompt_feat: torch.Tensor,
                     xvector: torch.Tensor, n_timesteps: int | None = None, *,
                     budget_bytes: int | None = None, max_codes: int | None = None
                     ) -> FlowStream | None:
        """The stream state after the whole chunks of the prompt whose lookahead lies inside
        the prompt (so no reply code can change them); None if there are none, or if their
        state does not fit the budget. Its buffers are allocated for a whole reply."""
        stream = cls(flow, prompt_codes, prompt_feat, xvector, n_timesteps,
                     budget_bytes=budget_bytes, max_codes=max_codes)
        lookahead = flow.config.encoder.pre_lookahead_len
        last = (len(prompt_codes) - lookahead) // flow.chunk * flow.chunk
        limit = stream.capacity.estimator_tokens
        if last <= 0 or (limit is not None and last > limit):
            return None
        stream._run(stream.prompt_codes, last, finalize=False)
        return stream


def _attention(module: nn.Module) -> list[str]:
    """Cache keys of the attention layers under ``module``."""
    return [m.cache_key for m in module.modules() if isinstance(m, KVAttention)]

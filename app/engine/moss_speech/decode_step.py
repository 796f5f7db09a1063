"""The per-row decode step in its four forms, and the validated choice between them.

A step forwards one appended row at a position: ``step(row [1, 1, 2], position, text_head)``
→ logits. ``EagerStep`` slices the caches with Python ints (``forward_rows``). The others run
``decode_static`` on *static input buffers*: the row ids and the position live on the device at
fixed addresses and each call copies into them, so no Python int reaches the forward and nothing
is allocated per row. ``StaticStep`` runs that eagerly, ``GraphedStep`` captures it with
``torch.cuda.CUDAGraph`` (no compiler) and replays it, ``CompiledStep`` hands it to
``torch.compile``.

:func:`select_decode_step` walks a plan (:mod:`.decode_policy`) and keeps the first path whose
steps agree with eager on the same inputs; any exception or mismatch is logged with its reason
and the next path is tried. Sampling stays outside the graph: the host needs each row anyway
(mode switches, stop rows, codes for the codec), so the one sync per row remains, and the
processors depend on live settings and per-step masks that a graph would freeze.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import Tensor

from app.engine.moss_speech.decode_policy import LABELS, PlannedPath
from app.engine.moss_speech.kv_cache import KVCaches
from app.engine.moss_speech.model import Logits, MossSpeechModel

log = logging.getLogger(__name__)

PROBE_PREFIX_ROWS = 3
VALIDATION_ROUNDS = 3  # compile's CUDA graphs warm up, record, then replay: compare all three
CAPTURE_WARMUP_ITERS = 3  # eager runs on the side stream before capture (PyTorch's CUDA docs)


class DecodeStep(Protocol):
    path: str
    thread_bound: bool  # recorded graphs belong to the thread and pool that made them
    caches: KVCaches  # the caches it reads and writes

    def __call__(self, row: Tensor, position: int, text_head: bool) -> Logits: ...


class EagerStep:
    """The plain cached forward (the reference every other step is checked against)."""

    path, thread_bound = "eager", False

    def __init__(self, model: MossSpeechModel, caches: KVCaches) -> None:
        self.model, self.caches = model, caches

    def __call__(self, row: Tensor, position: int, text_head: bool) -> Logits:
        return self.model.forward_rows(row, self.caches, position, text_head=text_head)


class StaticStep:
    """``decode_static`` on static buffers, run eagerly: the capture-independent half of the
    graph path (and the body that ``GraphedStep`` records). The row is embedded outside the
    recorded part (``embed_rows``: on the host when the tables live there) and copied into the
    static input."""

    path, thread_bound = "static", False

    def __init__(self, model: MossSpeechModel, caches: KVCaches) -> None:
        self.model, self.caches = model, caches
        self.embedded = torch.zeros((1, 1, model.config.hidden_size), dtype=model.dtype,
                                    device=model.device)  # [B, 1, H]
        self.position = torch.zeros(1, dtype=torch.int64, device=model.device)  # [1]

    def load(self, row: Tensor, position: int) -> None:
        """Embed the row [1, 1, 2] into the static buffers (no host sync on the device path)."""
        self.caches.check_room(position, 1)
        self.embedded.copy_(self.model.embed_rows(row.view(1, 1, 2)))
        self.position.fill_(position)

    def forward(self, text_head: bool) -> Logits:
        return self.model.decode_static(self.embedded, self.position, self.caches, text_head)

    def __call__(self, row: Tensor, position: int, text_head: bool) -> Logits:
        self.load(row, position)
        logits = self.forward(text_head)
        self.caches.length = position + 1
        return logits


class GraphedStep(StaticStep):
    """One CUDA graph per text-head setting, captured by hand and replayed per row.

    Captured on fresh caches (the warm-up writes row 0, which the first prefill overwrites).
    Both graphs share one memory pool; their outputs stay alive as the static logits, so a
    replay overwrites exactly the tensors the previous row returned."""

    path, thread_bound = "graph", True

    def __init__(self, model: MossSpeechModel, caches: KVCaches) -> None:
        super().__init__(model, caches)
        if model.device.type != "cuda":
            raise RuntimeError(f"CUDA graphs need a CUDA device, not {model.device}")
        if caches.length:
            raise ValueError("CUDA graphs are captured on empty caches")
        self.graphs: dict[bool, tuple[torch.cuda.CUDAGraph, Logits]] = {}
        with torch.no_grad(), torch.cuda.device(model.device):
            self._capture()

    def _capture(self) -> None:
        device = self.model.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up off the default stream, as the docs require
            for _ in range(CAPTURE_WARMUP_ITERS):
                for text_head in (False, True):
                    self.forward(text_head)
        torch.cuda.current_stream(device).wait_stream(side)
        pool = torch.cuda.graph_pool_handle()
        for text_head in (False, True):
            graph = torch.cuda.CUDAGraph()
            # thread_local: other threads of the app may query the GPU while this one records.
            with torch.cuda.graph(graph, pool=pool, stream=side,
                                  capture_error_mode="thread_local"):
                logits = self.forward(text_head)
            self.graphs[text_head] = (graph, logits)

    def __call__(self, row: Tensor, position: int, text_head: bool) -> Logits:
        self.load(row, position)
        graph, logits = self.graphs[text_head]
        graph.replay()
        self.caches.length = position + 1
        return logits


class CompiledStep(StaticStep):
    """``torch.compile`` of the static step: reduce-overhead (inductor's CUDA graphs) on CUDA,
    plain inductor on the CPU (its C++ wrapper was not faster for 40 layers; BENCHMARKS.md)."""

    path, thread_bound = "compile", True

    def __init__(self, model: MossSpeechModel, caches: KVCaches) -> None:
        super().__init__(model, caches)
        self.on_cuda = model.device.type == "cuda"
        from app.paths import use_private_compile_caches

        use_private_compile_caches()  # the app's 0700 cache, not /tmp (read when compiling)
        # Fixed addresses let the graphs write the caches in place instead of copying them.
        for tensor in [*caches.tensors(), self.embedded, self.position]:
            torch._dynamo.mark_static_address(tensor)
        self._compiled = torch.compile(model.decode_static,
                                       mode="reduce-overhead" if self.on_cuda else "default",
                                       fullgraph=True, dynamic=False)

    def forward(self, text_head: bool) -> Logits:
        if self.on_cuda:  # a new row: the previous row's outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        return self._compiled(self.embedded, self.position, self.caches, text_head)


Builder = Callable[[MossSpeechModel, KVCaches], DecodeStep]
BUILDERS: Mapping[str, Builder] = {"compile": CompiledStep, "graph": GraphedStep,
                                   "static": StaticStep, "eager": EagerStep}


@dataclass
class DecodeChoice:
    """The step in use, what was tried before it, and on which thread it was made."""

    step: DecodeStep
    notes: list[str] = field(default_factory=list)  # skipped or failed paths, with reasons
    setup_ms: float = 0.0  # building, capturing/compiling and validating
    thread: int = field(default_factory=threading.get_ident)

    @property
    def path(self) -> str:
        return self.step.path

    @property
    def summary(self) -> str:
        notes = f" ({'; '.join(self.notes)})" if self.notes else ""
        return f"{LABELS[self.path]}{notes}"


def select_decode_step(model: MossSpeechModel, caches: KVCaches, plan: Sequence[PlannedPath],
                       builders: Mapping[str, Builder] | None = None,
                       rounds: int = VALIDATION_ROUNDS) -> DecodeChoice:
    """The first planned path that builds and agrees with eager; eager when none does.

    Runs on fresh caches (validation prefills and decodes a short probe, then empties them)."""
    builders = BUILDERS if builders is None else builders
    if caches.length:
        raise ValueError("choose the decode step before anything is prefilled")
    started, notes = time.perf_counter(), []
    for planned in plan:
        if planned.skipped:
            notes.append(f"{planned.path} skipped: {planned.skipped}")
            continue
        if planned.path == "eager":
            break
        problem, step = _try_path(model, caches, builders[planned.path], rounds)
        if step is not None:
            return DecodeChoice(step, notes, ms_since(started))
        log.warning("decode step %r not used: %s", planned.path, problem)
        notes.append(f"{planned.path} failed: {problem}")
    return DecodeChoice(builders["eager"](model, caches), notes, ms_since(started))


def _try_path(model: MossSpeechModel, caches: KVCaches, build: Builder,
              rounds: int) -> tuple[str | None, DecodeStep | None]:
    step: DecodeStep | None = None
    try:
        step = build(model, caches)
        problem = validate_step(model, step, EagerStep(model, caches), rounds)
    except Exception as exc:  # no compiler, a capture that synced, out of memory, ...
        problem = _describe(exc)
    finally:
        caches.reset()
    return (problem, None) if problem else (None, step)


def probe(model: MossSpeechModel, rounds: int) -> tuple[Tensor, list[tuple[Tensor, bool]]]:
    """A short prompt [1, K, 2] and the decode steps that follow it: per round one text row
    with the text head and one audio row without it (both graphs, both embeddings)."""
    cfg, device = model.config, model.device
    prefix = torch.tensor([[(cfg.im_start_token_id, cfg.audio_pad_token_id),
                            (10, cfg.audio_pad_token_id),
                            (cfg.sosp_token_id, cfg.audio_pad_token_id)]], device=device)
    steps = []
    for r in range(rounds):
        text_row = torch.tensor([[[11 + r, cfg.audio_pad_token_id]]], device=device)
        audio_row = torch.tensor([[[cfg.modality_pad_token_id, 3 + r]]], device=device)
        steps += [(text_row, True), (audio_row, False)]
    return prefix, steps


def validate_step(model: MossSpeechModel, candidate: DecodeStep, reference: DecodeStep,
                  rounds: int = VALIDATION_ROUNDS) -> str | None:
    """Run the same steps through both on the same cached prompt; the first difference, or None.

    Logits must be close (relative to their scale) and argmax ids equal, unless the reference's
    own top two are within the tolerance (a tie that rounding may break either way)."""
    caches = reference.caches
    prefix, steps = probe(model, rounds)
    needed = prefix.shape[1] + len(steps)
    if caches.max_rows < needed:
        return f"the KV cache holds {caches.max_rows} rows, validation needs {needed}"
    outputs: list[list[Logits]] = []
    with torch.no_grad():
        for step in (candidate, reference):
            caches.reset()
            model.forward_rows(prefix, caches, 0)
            outputs.append([_cloned(step(row, prefix.shape[1] + i, text_head))
                            for i, (row, text_head) in enumerate(steps)])
    caches.reset()
    tolerance = tolerance_for(model.dtype)
    for i, (ours, theirs) in enumerate(zip(*outputs, strict=True)):
        for name, got, want in (("text", ours[0], theirs[0]), ("audio", ours[1], theirs[1])):
            problem = compare_logits(got, want, tolerance)
            if problem:
                return f"step {i + 1} at position {prefix.shape[1] + i}, {name} logits {problem}"
    return None


def tolerance_for(dtype: torch.dtype) -> float:
    """Largest |difference| allowed, as a fraction of the reference logits' largest magnitude."""
    return 1e-3 if dtype == torch.float32 else 3e-2


def compare_logits(got: Tensor | None, want: Tensor | None, tolerance: float) -> str | None:
    """Why ``got`` [B, V] does not match ``want``, or None."""
    if got is None or want is None:
        return None if got is None and want is None else "missing"
    if got.shape != want.shape:
        return f"have shape {list(got.shape)}, expected {list(want.shape)}"
    if not bool(torch.isfinite(got).all()):
        return "are not finite"
    allowed = tolerance * max(1.0, float(want.abs().max()))
    diff = float((got.float() - want.float()).abs().max())
    if diff > allowed:
        return f"differ by up to {diff:.3g} (allowed {allowed:.3g})"
    got_ids, want_ids = got.argmax(-1), want.argmax(-1)  # [B]
    best = want.gather(-1, want_ids[:, None])[:, 0]
    picked = want.gather(-1, got_ids[:, None])[:, 0]
    if bool(((got_ids != want_ids) & (best - picked > allowed)).any()):
        return f"pick ids {got_ids.tolist()} instead of {want_ids.tolist()}"
    return None


def _cloned(logits: Logits) -> Logits:
    """A graph's outputs are overwritten by its next replay: keep copies for the comparison."""
    text, audio = logits
    return (None if text is None else text.clone()), audio.clone()


def _describe(exc: BaseException) -> str:
    """The error, led by the one that started it: a failed capture raises again when it ends,
    and that second error says less than the first."""
    text, root = f"{type(exc).__name__}: {_first_line(exc)}", exc
    for _ in range(8):
        earlier = root.__cause__ or root.__context__
        if earlier is None:
            break
        root = earlier
    if root is exc:
        return text
    return f"{type(root).__name__}: {_first_line(root)} (then {text})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else "(no message)"


def ms_since(started: float) -> float:
    """Milliseconds of wall time since a ``time.perf_counter()`` reading."""
    return (time.perf_counter() - started) * 1000

"""Golden fp32 outputs of the tiny checkpoints: what MOSS-Speech computes, frozen.

The memory work (host embeddings, bounded attention, codec precision, quantised heads) must not
change what the model and codec compute in fp32. These cases run the tiny random checkpoints
(``write_tiny_checkpoint(seed=0)``, ``write_tiny_codec(seed=0)``) through every fp32 path the
engine uses and keep small fingerprints of the results in tests/fixtures/golden/*.npz: integer
outputs whole, float outputs as a strided sample plus their sum, mean square and top entries.

Regenerate (only when a change of the computation is intended, and say so in the commit):

    python -m tests.engine.moss_speech.golden_cases --write
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

GOLDEN_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "golden"
LM_FILE = GOLDEN_DIR / "lm_tiny_fp32.npz"
CODEC_FILE = GOLDEN_DIR / "codec_tiny_fp32.npz"
SAMPLE_POINTS = 256  # float outputs are kept as this many evenly strided values (+ stats)
# Float tolerance against the stored values, relative to the largest stored magnitude: loose
# enough for another CPU's summation order, tight enough that any change of the math shows.
FLOAT_RTOL = 2e-4


def fingerprint(name: str, values: torch.Tensor | np.ndarray) -> dict[str, np.ndarray]:
    """Small arrays that pin ``values``: all of it if integer, else a sample and statistics."""
    array = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else values
    array = np.asarray(array)
    if np.issubdtype(array.dtype, np.integer):
        return {name: array.astype(np.int64)}
    flat = array.astype(np.float64).reshape(-1)
    step = max(1, len(flat) // SAMPLE_POINTS)
    top = np.argsort(-flat, kind="stable")[:8]
    return {f"{name}.sample": flat[::step].astype(np.float32),
            f"{name}.stats": np.array([flat.mean(), np.sqrt((flat ** 2).mean()),
                                       flat.min(), flat.max()]),  # all in the values' unit
            f"{name}.size": np.array([len(flat)], dtype=np.int64),
            f"{name}.top_ids": top.astype(np.int64)}


def lm_prompt() -> torch.Tensor:
    """A fixed speech-to-speech-shaped grid [40, 2]: text header, 30 audio codes, sosp."""
    pad, sosp, mpad, eosp = 512, 151646, 151667, 16384
    codes = [(i * 2654435761) % 16384 for i in range(1, 31)]
    rows = [(151644, pad), (872, pad), (198, pad), (sosp, pad)]
    rows += [(mpad, c) for c in codes]
    rows += [(mpad, eosp), (151645, pad), (198, pad), (151644, pad), (77091, pad), (sosp, pad)]
    return torch.tensor(rows, dtype=torch.int64)


def lm_outputs(model_dir: Path) -> dict[str, np.ndarray]:
    """Reference forward, chunked cached prefill (the masked path), and sampled rows."""
    from app.engine.moss_speech.generate import GenerationSession
    from app.engine.moss_speech.sampling import Sampling
    from app.engine.moss_speech.weights import load_model

    model = load_model(model_dir, precision="fp32")
    prompt = lm_prompt()
    out: dict[str, np.ndarray] = {}
    text, audio = model.forward_grid(prompt[None])  # [1, L, V], [1, L, V_audio]
    out.update(fingerprint("grid_text_last", text[0, -1]))
    out.update(fingerprint("grid_audio_last", audio[0, -1]))
    out.update(fingerprint("grid_audio_all", audio[0]))
    # chunks of 7 rows: every chunk after the first attends over a cached prefix under a mask
    session = GenerationSession(model, max_rows=128, prefill_chunk_rows=7)
    session.prefill(prompt[:-1])  # ends in text mode after <|im_start|>assistant
    session.prefill(prompt)  # reuses the cache, runs the sosp row
    assert session._logits is not None
    out.update(fingerprint("prefill_audio_last", session._logits[1][0]))
    sampled = Sampling(max_new_rows=24, min_new_rows=4)
    out["rows_sampled"] = np.array(list(session.rows(sampled, seed=3)), dtype=np.int64)
    greedy = Sampling(temperature=0.0, max_new_rows=16, min_new_rows=0)
    session.prefill(prompt[:-1])  # text mode: the text head decides
    out["rows_greedy"] = np.array(list(session.rows(greedy, seed=0)), dtype=np.int64)
    return out


def codec_outputs(codec_dir: Path, cache_dir: Path) -> dict[str, np.ndarray]:
    """Encode ids, voice conditioning, flow mel, vocoder waveform, streamed waveform."""
    from app.engine.moss_speech.codec import load_codec
    from app.engine.moss_speech.codec.testing import speech_like

    codec = load_codec(codec_dir, voice_cache_dir=cache_dir)
    out: dict[str, np.ndarray] = {}
    out["encode_ids"] = codec.encode(speech_like(2.0, 16000, seed=3), 16000).numpy()
    voice = codec.voice_from_samples(speech_like(2.3, 44100, seed=1), 44100)
    out["voice_codes"] = voice.prompt_codes.numpy()
    out.update(fingerprint("voice_mel", voice.prompt_mel))
    out.update(fingerprint("voice_xvector", voice.xvector))
    codes = torch.randint(0, 16384, (17,), generator=torch.Generator().manual_seed(5))
    mel = codec.flow(0).inference(codes, voice.prompt_codes, voice.prompt_mel, voice.xvector,
                                  streaming=False, finalize=True)  # [1, 80, 68]
    out.update(fingerprint("flow_mel", mel))
    speech, _ = codec.hift.inference(mel, torch.Generator().manual_seed(2))
    out.update(fingerprint("hift_wave", speech))
    with codec.stream_decoder(voice, chunk=5, seed=4) as decoder:
        pieces = [decoder.push(codes[i:i + 4]) for i in range(0, len(codes), 4)]
        pieces.append(decoder.finish())
    out.update(fingerprint("stream_wave", np.concatenate(pieces)))
    return out


def compute_all(folder: Path) -> dict[Path, dict[str, np.ndarray]]:
    from app.engine.moss_speech.testing import write_tiny_checkpoint, write_tiny_codec

    torch.manual_seed(0)  # nothing should read the global RNG; make it fixed all the same
    model_dir = write_tiny_checkpoint(folder / "model", seed=0)
    codec_dir = write_tiny_codec(folder / "codec", seed=0)
    return {LM_FILE: lm_outputs(model_dir), CODEC_FILE: codec_outputs(codec_dir, folder / "c")}


def differences(stored: dict[str, np.ndarray], now: dict[str, np.ndarray]) -> list[str]:
    """Every key whose value moved (ints: exactly; floats: beyond FLOAT_RTOL of its scale)."""
    problems = [f"{k}: missing now" for k in sorted(set(stored) - set(now))]
    problems += [f"{k}: not in the golden file" for k in sorted(set(now) - set(stored))]
    for key in sorted(set(stored) & set(now)):
        want, got = stored[key], now[key]
        if want.shape != got.shape:
            problems.append(f"{key}: shape {got.shape}, golden {want.shape}")
        elif np.issubdtype(want.dtype, np.integer) and not key.endswith("top_ids"):
            if not np.array_equal(want, got):
                problems.append(f"{key}: {int((want != got).sum())} of {want.size} differ")
        elif key.endswith("top_ids"):
            if not np.array_equal(want[:3], got[:3]):  # the first few; later ones may tie
                problems.append(f"{key}: {got[:3].tolist()}, golden {want[:3].tolist()}")
        else:
            sample = stored.get(key.rsplit(".", 1)[0] + ".sample", want)
            scale = max(1e-12, float(np.abs(sample).max()))
            worst = float(np.abs(want.astype(np.float64) - got).max()) / scale
            if worst > FLOAT_RTOL:
                problems.append(f"{key}: off by {worst:.2e} of its scale")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="overwrite the golden files")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        results = compute_all(Path(tmp))
    report: Callable[[str], None] = print
    for path, values in results.items():
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.savez_compressed(path, **values)
            report(f"wrote {path} ({path.stat().st_size} bytes, {len(values)} arrays)")
        else:
            with np.load(path) as stored:
                problems = differences(dict(stored), values)
            report(f"{path.name}: " + ("matches" if not problems else "; ".join(problems)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

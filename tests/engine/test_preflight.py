from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine.folders import expected_lm_shapes
from app.engine.preflight import (
    GIB,
    FlowDims,
    ModelDims,
    default_flow_cache_bytes,
    dims_from_folder,
    estimate,
    estimate_all,
    fit_problem,
    flow_cache_bytes,
    flow_cache_bytes_for,
    query_gpu_memory,
    read_voice_seconds,
    recommend,
    voice_seconds,
    weight_bytes,
)

TINY = {"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
        "num_shared_layers": 1, "num_modality_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 8, "vocab_size": 32, "audio_vocab_size": 24,
        "rms_norm_eps": 1e-6, "rope_theta": 1e6}


def test_published_model_matches_the_contract_numbers() -> None:
    dims = ModelDims()
    assert math.isclose(dims.param_count(), 9.10e9, rel_tol=0.005)  # contract §1.1
    assert dims.kv_bytes_per_row() == 160 * 1024  # contract §1.4: 160 KiB per row in bf16
    # contract §5: HF reference bf16 load 16.94 GiB
    assert math.isclose(weight_bytes(dims, "bf16") / GIB, 16.94, rel_tol=0.01)


def test_param_count_equals_the_checkpoint_manifest() -> None:
    dims = ModelDims.from_config(TINY)
    manifest = expected_lm_shapes(TINY)
    assert dims.param_count() == sum(math.prod(shape) for shape in manifest.values())
    assert weight_bytes(dims, "fp32") == 4 * dims.param_count()


def test_estimates_order_and_scale_with_context() -> None:
    estimates = estimate_all(4096)
    totals = [estimates[p].total_bytes for p in ("fp32", "bf16", "int8", "int4")]
    assert totals == sorted(totals, reverse=True)
    # On the GPU: layers at 1 (int8) or ~0.53 (int4) bytes, heads int8, norms bf16; the
    # embedding tables are in host memory in every precision.
    assert 0.49 < estimates["int8"].weights_bytes / estimates["bf16"].weights_bytes < 0.51
    assert 0.28 < estimates["int4"].weights_bytes / estimates["bf16"].weights_bytes < 0.30
    assert estimates["bf16"].host_bytes == estimates["int4"].host_bytes == 2 * (
        151680 + 16512) * 4096
    small, big = estimate("bf16", 1024), estimate("bf16", 8192)
    assert big.kv_cache_bytes - small.kv_cache_bytes == 7168 * 160 * 1024
    assert small.kv_rows == 1024 + 1280  # the transcript pass's cache is always counted
    assert big.total_bytes - small.total_bytes > 7168 * 160 * 1024
    assert "lm weights" in big.breakdown() and "kv cache" in big.breakdown()


def test_recommend_picks_the_best_precision_that_fits() -> None:
    bf16 = estimate("bf16", 4096).total_bytes
    assert recommend(24 * GIB, 4096).precision == "bf16"
    assert recommend(bf16, 4096).precision == "bf16"  # exactly enough fits
    assert recommend(bf16 - 1, 4096).precision == "int8"
    assert recommend(12 * GIB, 4096).precision == "int8"
    assert recommend(11 * GIB, 4096).precision == "int4"
    none = recommend(8 * GIB, 4096)
    assert none.precision is None and "context" in none.message
    # A shorter context can make bf16 fit where a long one does not.
    assert recommend(bf16, 40960).precision != "bf16"


def test_fit_problem_refuses_and_names_an_alternative() -> None:
    assert fit_problem("int4", 24 * GIB, 4096) is None
    problem = fit_problem("bf16", 16 * GIB, 4096)
    assert problem is not None and "int8" in problem and "16.0 GiB" in problem


def test_dims_from_folder_reads_config_or_falls_back(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    assert dims_from_folder(tmp_path).hidden_size == 16
    (tmp_path / "config.json").write_text("{not json")
    assert dims_from_folder(tmp_path) == ModelDims()
    assert dims_from_folder(None) == ModelDims()


def test_gpu_query_without_cuda_explains_why() -> None:
    result = query_gpu_memory()
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:
        has_cuda = False
    if has_cuda:
        assert result.gpus and result.best is not None and result.best.free_bytes > 0
    else:
        assert result.gpus == () and result.note and result.best is None


def test_preflight_and_model_store_do_not_load_torch_or_qt() -> None:
    code = ("import sys, app.engine.preflight, app.model_store; "
            "print('\\n'.join(sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, timeout=120).stdout.split()
    assert "torch" not in loaded and "PySide6" not in loaded


def test_the_flow_cache_is_counted_up_to_its_budget_in_every_precision() -> None:
    per_code = FlowDims().estimator_bytes_per_code()  # the flow in fp16 on a GPU
    assert FlowDims(element_bytes=4).estimator_bytes_per_code() / 4 == 4.375 * 2**20  # fp32
    assert per_code * 2 == FlowDims(element_bytes=4).estimator_bytes_per_code()
    budgeted = flow_cache_bytes(1024, 500, voice_seconds=3.0)
    unbounded = flow_cache_bytes(0, 500, voice_seconds=3.0)
    codes = math.ceil(3.0 * 12.5) + 1 + 500
    assert unbounded == codes * (per_code + FlowDims().encoder_bytes_per_code())
    assert 4.5 * GIB < unbounded < 5 * GIB  # a 40 s reply after a 3 s voice, nothing bounded
    assert 1.0 * GIB < budgeted < 1.1 * GIB  # the budget + the encoder's small share
    assert flow_cache_bytes(0, 500, voice_seconds=20.0) > unbounded  # longer voice, more
    more_codes = (math.ceil(20.0 * 12.5) + 1 + 500) - codes  # only the encoder's share grows
    assert flow_cache_bytes(1024, 500, voice_seconds=20.0) - budgeted == (
        more_codes * FlowDims().encoder_bytes_per_code())
    assert flow_cache_bytes(10**6, 10) == flow_cache_bytes(0, 10)  # never above the worst case
    for precision in ("bf16", "int8", "int4", "fp32"):
        small = estimate(precision, 4096, flow_cache_bytes=budgeted)
        big = estimate(precision, 4096, flow_cache_bytes=unbounded)
        assert big.flow_cache_bytes - small.flow_cache_bytes == unbounded - budgeted
        assert big.total_bytes - small.total_bytes >= unbounded - budgeted
        assert "flow cache" in big.breakdown()
    assert estimate("bf16", 4096).flow_cache_bytes == default_flow_cache_bytes()


def test_the_default_settings_fit_a_24_gb_gaming_gpu_and_an_unbounded_cache_does_not() -> None:
    """An RTX 4090 has 23.99 GiB; the desktop and the CUDA context take a few hundred MiB."""
    rows = 4096  # the context bound (the transcript pass's cache is added by the plan)
    assert fit_problem("bf16", 23 * GIB, rows) is None
    worst = flow_cache_bytes(0, 500, voice_seconds=3.0)  # a 40 s reply, no budget
    problem = fit_problem("bf16", 23 * GIB, rows, flow_cache_bytes=worst)
    assert problem is not None and "Choose int" in problem
    advice = recommend(8 * GIB, rows, flow_cache_bytes=default_flow_cache_bytes())
    assert advice.precision is None and "flow cache budget" in advice.message


@pytest.mark.parametrize(("precision", "target_gib"), [("bf16", 20.0), ("int8", 12.0),
                                                       ("int4", 9.0)])
def test_the_default_plan_meets_the_cards_people_own(precision: str, target_gib: float) -> None:
    """Issue 15: bf16 on a 24 GB card under a Windows desktop, int8 on 16 GB, int4 on 12 GB —
    the full published model, default settings, transients included."""
    assert estimate(precision, 4096).total_bytes <= target_gib * GIB


def test_flow_cache_bytes_for_settings_reads_the_voice_length(tmp_path: Path) -> None:
    import numpy as np
    import soundfile

    from app.settings import Settings

    voice = tmp_path / "voice.wav"
    soundfile.write(voice, np.zeros(16000 * 4, np.float32), 16000)
    settings = Settings().with_value("streaming.flow_cache_budget_mib", 0)
    assert voice_seconds(voice) == 4.0
    assert voice_seconds(tmp_path / "missing.wav") == voice_seconds(None) == 20.0
    with_voice = settings.with_value("engine.voice_prompt", voice)
    assert flow_cache_bytes_for(with_voice) == flow_cache_bytes(0, 500, voice_seconds=4.0)
    assert flow_cache_bytes_for(settings) == flow_cache_bytes(0, 500, voice_seconds=20.0)
    longer = with_voice.with_value("sampling.max_new_rows", 1000)
    assert flow_cache_bytes_for(longer) > flow_cache_bytes_for(with_voice)
    assert flow_cache_bytes_for(Settings()) == default_flow_cache_bytes()
    assert flow_cache_bytes(0, 8192) == flow_cache_bytes(0, 4000)  # the flow's 300 s limit


def test_the_voice_length_is_read_again_when_the_file_changes(tmp_path: Path) -> None:
    import numpy as np
    import soundfile

    voice = tmp_path / "voice.wav"
    soundfile.write(voice, np.zeros(16000 * 4, np.float32), 16000)
    assert read_voice_seconds(voice) == read_voice_seconds(str(voice)) == 4.0
    soundfile.write(voice, np.zeros(16000 * 6, np.float32), 16000)  # another size
    assert read_voice_seconds(voice) == 6.0
    voice.unlink()
    with pytest.raises(OSError):
        read_voice_seconds(voice)

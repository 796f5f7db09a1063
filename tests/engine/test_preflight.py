from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from app.engine.folders import expected_lm_shapes
from app.engine.preflight import (
    GIB,
    ModelDims,
    dims_from_folder,
    estimate,
    estimate_all,
    fit_problem,
    query_gpu_memory,
    recommend,
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
    # Quantised weights: linear layers at 1 (int8) or ~0.53 (int4) bytes, the rest bf16.
    assert 0.55 < estimates["int8"].weights_bytes / estimates["bf16"].weights_bytes < 0.6
    assert 0.35 < estimates["int4"].weights_bytes / estimates["bf16"].weights_bytes < 0.4
    small, big = estimate("bf16", 1024), estimate("bf16", 8192)
    assert big.kv_cache_bytes == 8 * small.kv_cache_bytes
    assert big.total_bytes - small.total_bytes == 7168 * 160 * 1024
    assert "weights" in big.breakdown() and "KV cache" in big.breakdown()


def test_recommend_picks_the_best_precision_that_fits() -> None:
    bf16 = estimate("bf16", 4096).total_bytes
    assert recommend(24 * GIB, 4096).precision == "bf16"
    assert recommend(bf16, 4096).precision == "bf16"  # exactly enough fits
    assert recommend(bf16 - 1, 4096).precision == "int8"
    assert recommend(12 * GIB, 4096).precision == "int4"
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

"""dmref_fixtures: read dmref's golden fixtures and judge a candidate's outputs
with the tolerance rule of `dmref verify`, from Python (numpy only; torch
tensors are accepted where arrays are). docs/python.md is the guide.

    import dmref_fixtures as df
    for case in df.cases("fixtures/golden", "preln.kernel.*.f32.*"):
        out = my_kernel(case.inputs, case.params, case.config)  # {"output.out": ..., ...}
        df.assert_conforms(out, case, "f32")
"""
from .layouts import (attnres_ops_kernel_args, attnres_ops_outputs, hc_ops_inputs, hc_ops_outputs, ldm_ops_grads,
                      ldm_ops_inputs, ldm_ops_outputs, mhc_from_fused,
                      mhc_ops_inputs, mhc_ops_outputs, mhc_to_fused, res_from_storage, res_to_storage)
from .cases import Case, ManifestCase, cases, default_fixtures_dir, glob_match, load_case, read_manifest
from .safetensors import DTYPES, BadInput, File, parse, read, round_to, serialize, write
from .verify import (CANDIDATE_DTYPES, ConformanceError, Failure, TensorVerdict, Verdict, as_float64,
                     assert_conforms, check, check_fixture, golden_names, recipe, tolerance, tolerance_rule, ulp,
                     unrepresentable)

__version__ = "0.1.0"

__all__ = ["BadInput", "CANDIDATE_DTYPES", "Case", "ConformanceError", "DTYPES", "Failure", "File", "ManifestCase",
           "TensorVerdict", "Verdict", "as_float64", "assert_conforms", "attnres_ops_kernel_args", "attnres_ops_outputs", "cases", "check", "check_fixture",
           "default_fixtures_dir", "glob_match", "golden_names", "ldm_ops_grads", "ldm_ops_inputs", "ldm_ops_outputs", "load_case", "hc_ops_inputs", "hc_ops_outputs", "mhc_from_fused", "mhc_ops_inputs", "mhc_ops_outputs", "mhc_to_fused", "parse",
           "read", "read_manifest", "recipe", "res_from_storage", "res_to_storage", "round_to", "serialize", "tolerance",
           "tolerance_rule", "ulp", "unrepresentable", "write"]

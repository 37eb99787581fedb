"""mapping.py: bih scenario knobs -> vLLM's offline LLM(...) arguments and environment.

llm_kwargs(init) is pure (no vLLM import), so the mapping is tested where vLLM cannot run.
A knob without a vLLM equivalent raises Unsupported: never a silent run of something else.

vLLM names, from its documentation:
- CompilationConfig.pass_config.enable_sp turns sequence parallelism on and sp_min_token_num is
  the smallest step (tokens) it applies to (https://docs.vllm.ai/en/v0.14.1/api/vllm/config/vllm/
  lists enable_sp among the pass_config flags of every optimization level; the vllm-ascend
  sequence-parallelism guide documents sp_min_token_num as "from upstream vllm's pass_config").
  The SP pass needs the whole graph compiled (docs.vllm.ai .../passes/fusion/sequence_parallelism).
- CompilationConfig.cudagraph_mode: CUDAGraphMode NONE | PIECEWISE | FULL (vllm.config.compilation);
  cudagraph_capture_sizes: the batch sizes captured.
- VLLM_BATCH_INVARIANT=1: vLLM's batch-invariant kernels.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from bih_engine import Unsupported  # noqa: E402

CUDAGRAPH_MODES = {"none": "NONE", "piecewise": "PIECEWISE", "full": "FULL"}


def _positive_int(key, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise Unsupported("%s=%r: expected a positive integer" % (key, value))
    return value


def llm_kwargs(init):
    """(kwargs for vllm.LLM, environment variables to set before importing vllm) for `init`."""
    model = init.get("model", {})
    if model.get("format") != "hf":
        raise Unsupported("vLLM loads HF checkpoint folders here; model.format is %r"
                          % model.get("format"))
    limits = init.get("limits", {})
    kwargs = {"model": model["path"], "dtype": "bfloat16", "seed": 0,
              "skip_tokenizer_init": True}  # prompts are token ids; bih's checkpoints have none
    if "max_model_len" in limits:
        kwargs["max_model_len"] = limits["max_model_len"]
    if "max_batch" in limits:
        kwargs["max_num_seqs"] = limits["max_batch"]
    compilation, passes, env = {}, {}, {}
    knobs = init.get("knobs", {})
    for key in sorted(knobs):
        value = knobs[key]
        if key == "parallel.tp":
            kwargs["tensor_parallel_size"] = _positive_int(key, value)
        elif key == "sequence_parallel.enabled":
            passes["enable_sp"] = bool(value)
        elif key == "sequence_parallel.min_tokens":
            passes["sp_min_token_num"] = _positive_int(key, value)
        elif key == "cudagraph.mode":
            if value not in CUDAGRAPH_MODES:
                raise Unsupported("cudagraph.mode=%r has no vLLM CUDAGraphMode" % (value,))
            compilation["cudagraph_mode"] = CUDAGRAPH_MODES[value]
        elif key == "cudagraph.capture_sizes":
            compilation["cudagraph_capture_sizes"] = [_positive_int(key, s) for s in value]
        elif key == "prefix_caching.enabled":
            kwargs["enable_prefix_caching"] = bool(value)
        elif key == "prefix_caching.block_size":
            kwargs["block_size"] = _positive_int(key, value)  # the KV cache's block size
        elif key == "chunked_prefill.max_tokens":
            kwargs["enable_chunked_prefill"] = True
            kwargs["max_num_batched_tokens"] = _positive_int(key, value)
        elif key == "kernels":
            if value not in ("invariant", "vendor"):
                raise Unsupported("kernels=%r: vLLM has invariant or vendor kernels" % (value,))
            env["VLLM_BATCH_INVARIANT"] = "1" if value == "invariant" else "0"
        elif key.startswith("nccl_env."):
            env[key[len("nccl_env."):]] = str(value)
        else:
            raise Unsupported("the vLLM adapter cannot map knob %s=%r" % (key, value))
    if passes.get("sp_min_token_num") and not passes.get("enable_sp"):
        raise Unsupported("sequence_parallel.min_tokens without sequence_parallel.enabled true")
    if passes:
        compilation["pass_config"] = passes
    if compilation:
        kwargs["compilation_config"] = compilation
    return kwargs, env

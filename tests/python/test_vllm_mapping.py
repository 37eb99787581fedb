"""test_vllm_mapping.py: bih knobs -> vLLM LLM(...) arguments (adapters/vllm/mapping.py), no vLLM."""

import os
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "adapters", "vllm"))
from mapping import llm_kwargs  # noqa: E402
from bih_engine import Unsupported  # noqa: E402  (mapping put adapters/python on the path)


def init(**knobs):
    return {"type": "init", "protocol": "bih.engine/1",
            "model": {"format": "hf", "path": "/ckpt"}, "knobs": knobs, "options": {},
            "limits": {"max_batch": 64, "max_model_len": 512, "max_tokens": 24}}


class Mapping(unittest.TestCase):
    def test_no_knobs_is_vllms_defaults(self):
        kwargs, env = llm_kwargs(init())
        self.assertEqual(kwargs["model"], "/ckpt")
        self.assertEqual(kwargs["dtype"], "bfloat16")
        self.assertEqual(kwargs["max_model_len"], 512)
        self.assertEqual(kwargs["max_num_seqs"], 64)
        for key in ("tensor_parallel_size", "compilation_config", "enable_prefix_caching",
                    "enable_chunked_prefill"):
            self.assertNotIn(key, kwargs)
        self.assertEqual(env, {})

    def test_every_knob(self):
        kwargs, env = llm_kwargs(init(**{
            "parallel.tp": 2, "sequence_parallel.enabled": True,
            "sequence_parallel.min_tokens": 64, "cudagraph.mode": "full",
            "cudagraph.capture_sizes": [1, 2, 4], "prefix_caching.enabled": True,
            "prefix_caching.block_size": 32,
            "chunked_prefill.max_tokens": 256, "kernels": "invariant",
            "nccl_env.NCCL_ALGO": "Tree", "nccl_env.NCCL_NVLS_ENABLE": 0}))
        self.assertEqual(kwargs["tensor_parallel_size"], 2)
        self.assertEqual(kwargs["compilation_config"], {
            "pass_config": {"enable_sp": True, "sp_min_token_num": 64},
            "cudagraph_mode": "FULL", "cudagraph_capture_sizes": [1, 2, 4]})
        self.assertIs(kwargs["enable_prefix_caching"], True)
        self.assertEqual(kwargs["block_size"], 32)
        self.assertIs(kwargs["enable_chunked_prefill"], True)
        self.assertEqual(kwargs["max_num_batched_tokens"], 256)
        self.assertEqual(env, {"VLLM_BATCH_INVARIANT": "1", "NCCL_ALGO": "Tree",
                               "NCCL_NVLS_ENABLE": "0"})

    def test_graph_modes_and_switches_off(self):
        for mode, name in (("none", "NONE"), ("piecewise", "PIECEWISE"), ("full", "FULL")):
            kwargs, _ = llm_kwargs(init(**{"cudagraph.mode": mode}))
            self.assertEqual(kwargs["compilation_config"]["cudagraph_mode"], name)
        kwargs, env = llm_kwargs(init(**{"prefix_caching.enabled": False, "kernels": "vendor",
                                         "sequence_parallel.enabled": False}))
        self.assertIs(kwargs["enable_prefix_caching"], False)
        self.assertEqual(kwargs["compilation_config"]["pass_config"], {"enable_sp": False})
        self.assertEqual(env["VLLM_BATCH_INVARIANT"], "0")  # the adapter unsets it

    def test_unsupported(self):
        cases = [{"parallel.pp": 2}, {"attention.backend": "flash"}, {"parallel.tp": 0},
                 {"cudagraph.mode": "sometimes"}, {"kernels": "triton"},
                 {"sequence_parallel.min_tokens": 64}, {"chunked_prefill.max_tokens": -1}]
        for knobs in cases:
            with self.subTest(knobs=knobs), self.assertRaises(Unsupported) as caught:
                llm_kwargs(init(**knobs))
            self.assertIn(next(iter(knobs)).split(".")[0], caught.exception.reason)
        gguf = init()
        gguf["model"]["format"] = "gguf"
        with self.assertRaises(Unsupported):
            llm_kwargs(gguf)


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/env python3
"""adapter.py: vLLM's offline LLM engine under bih's test, over the bih.engine/1 protocol.

vLLM cannot run on bih's CPU build machine: this adapter runs on a GPU machine with vllm
installed (setup.sh); its knob mapping (mapping.py) is tested everywhere without vllm.

Each generate request is ONE LLM.generate call holding every prompt (token ids), so vLLM's
scheduler batches them as a server would. SamplingParams: temperature 0 (greedy), exactly
max_tokens (min_tokens = max_tokens, ignore_eos: with ignore_eos EOS is not a stop token, so
min_tokens masks nothing), logprobs=0 (the sampled token's own logprob only). The value is the
logprob vLLM reports for the sampled token (fp32 log_softmax of the raw logits by default).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)
from bih_engine import Adapter, progress, run  # noqa: E402
from mapping import llm_kwargs  # noqa: E402


class VllmAdapter(Adapter):
    name = "bih-vllm"
    version = "1"

    def start(self, init):
        kwargs, env = llm_kwargs(init)
        for name, value in env.items():  # before vllm is imported: it reads them at import
            os.environ[name] = value
        if env.get("VLLM_BATCH_INVARIANT") == "0":
            del os.environ["VLLM_BATCH_INVARIANT"]  # vendor kernels: vLLM's default
        kwargs.update(init.get("options", {}).get("llm_kwargs", {}))
        import vllm

        progress("loading %s" % kwargs["model"])
        self.llm = vllm.LLM(**kwargs)
        self.vllm = vllm
        return {"engine": {"name": "vllm", "version": vllm.__version__},
                "value": "logprob",
                "settings": {"llm_kwargs": kwargs, "env": env,
                             "sampling": "temperature=0, min_tokens=max_tokens, ignore_eos, "
                                         "logprobs=0"}}

    def generate(self, prompts, max_tokens):
        params = self.vllm.SamplingParams(temperature=0.0, max_tokens=max_tokens,
                                          min_tokens=max_tokens, ignore_eos=True, logprobs=0)
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        results = []
        for out in outputs:  # in the prompts' order
            completion = out.outputs[0]
            tokens = list(completion.token_ids)
            # logprobs[i] maps token id -> Logprob for step i; the sampled token is always there.
            values = [step[token].logprob for token, step in zip(tokens, completion.logprobs)]
            results.append((tokens, values))
        return results

    def shutdown(self):
        self.llm = None


if __name__ == "__main__":
    sys.exit(run(VllmAdapter()))

#!/usr/bin/env python3
"""adapter.py: HF transformers (model.generate) under bih's test, over the bih.engine/1 protocol.

Loads init.model.path (format "hf") with AutoModelForCausalLM in bf16 on CUDA and runs each
generate request as ONE left-padded batch through model.generate, greedy, for exactly max_tokens
new tokens. The value is the sampled token's logprob: fp32 log_softmax of the raw logits row
(output_logits, before any logits processor). Needs torch and transformers (setup.sh); runs on
the GPU machine only. options: {"attn_implementation": "eager" | "sdpa" | ...}.

compare.prefill / top_k / row_digest (docs/prefill-and-top-k.md): score runs ONE forward pass
over each left-padded batch of prompt + forced tokens (position ids from the attention mask, as
model.generate makes them); top-k comes from the same fp32 log_softmax rows (a stable sort, so
ties go to the lower id) and the row digest from the raw logits row's float32 bit patterns.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from bih_engine import Adapter, Unsupported, progress, row_digest, run  # noqa: E402

# What model.generate on one GPU does; a knob set to anything else cannot be honoured here.
HF_KNOB_VALUES = {
    "parallel.tp": 1,
    "sequence_parallel.enabled": False,
    "cudagraph.mode": "none",
    "prefix_caching.enabled": False,
    "kernels": "vendor",
}

PAD_ID = 0  # any valid id: its positions are masked out (attention_mask 0) and left of the prompt


def check_knobs(knobs):
    for key, value in sorted(knobs.items()):
        if key in HF_KNOB_VALUES and value == HF_KNOB_VALUES[key]:
            continue
        raise Unsupported("transformers model.generate cannot honour %s=%r: it runs on one GPU "
                          "with vendor kernels and no CUDA graphs, sequence parallelism, prefix "
                          "caching, chunked prefill or NCCL" % (key, value))


class HfAdapter(Adapter):
    name = "bih-hf-transformers"
    version = "1"

    def start(self, init):
        check_knobs(init.get("knobs", {}))
        model = init.get("model", {})
        if model.get("format") != "hf":
            raise Unsupported("transformers loads HF checkpoint folders; model.format is %r"
                              % model.get("format"))
        options = init.get("options", {})
        attn = options.get("attn_implementation", "eager")
        import torch
        import transformers
        from transformers import AutoModelForCausalLM

        self.torch = torch
        progress("loading %s" % model["path"])
        self.model = AutoModelForCausalLM.from_pretrained(
            model["path"], dtype=torch.bfloat16, attn_implementation=attn).to("cuda").eval()
        return {
            "engine": {"name": "transformers", "version": transformers.__version__},
            "value": "logprob",
            "capabilities": {"top_k": True, "row_digest": True},
            "settings": {
                "torch": torch.__version__,
                "dtype": "bfloat16",
                "attn_implementation": attn,
                "device": torch.cuda.get_device_name(0),
                "batching": "one left-padded batch per request (pad id %d, attention_mask 0)"
                            % PAD_ID,
                "value": "fp32 log_softmax of the raw logits row (output_logits) at the "
                         "sampled token",
                "generate": "do_sample=False, max_new_tokens=min_new_tokens=max_tokens, "
                            "eos_token_id=None",
            },
        }

    def generate(self, prompts, max_tokens):
        torch = self.torch
        width = max(len(p) for p in prompts)
        ids = [[PAD_ID] * (width - len(p)) + list(p) for p in prompts]
        mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
        with torch.no_grad():
            out = self.model.generate(
                input_ids=torch.tensor(ids, device="cuda"),
                attention_mask=torch.tensor(mask, device="cuda"),
                max_new_tokens=max_tokens, min_new_tokens=max_tokens, do_sample=False,
                temperature=None, top_p=None, top_k=None,
                output_logits=True, return_dict_in_generate=True,
                pad_token_id=PAD_ID, eos_token_id=None)
        tokens = out.sequences[:, width:]
        if tokens.shape[1] != max_tokens or len(out.logits) != max_tokens:
            raise RuntimeError("model.generate stopped after %d of %d tokens"
                               % (tokens.shape[1], max_tokens))
        logits = torch.stack(out.logits, dim=1).float()  # [batch, steps, vocab], raw
        # Greedy on raw logits: a logits processor that changed the choice (an EOS mask, say)
        # would be a silent run of something else.
        if not torch.equal(logits.argmax(dim=-1), tokens):
            raise RuntimeError("a sampled token is not the argmax of its raw logits row")
        logprobs = torch.log_softmax(logits, dim=-1)
        values = logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        self.last_stats = {"steps": max_tokens}
        return [(t.tolist(), v.tolist(), self._extras(logits[i], logprobs[i]))
                for i, (t, v) in enumerate(zip(tokens.cpu(), values.cpu()))]

    def _extras(self, logits, logprobs):
        """top-k and row digests of one sequence's rows ([steps, vocab]) as the request asks."""
        extras = {}
        if self.request_top_k > 0:
            order = self.torch.sort(logprobs, dim=-1, descending=True, stable=True).indices
            ids = order[:, :self.request_top_k]
            extras["top_k_ids"] = ids.cpu().tolist()
            extras["top_k_values"] = logprobs.gather(-1, ids).cpu().tolist()
        if self.request_row_digest:
            words = logits.contiguous().view(self.torch.int32).cpu().tolist()
            extras["row_digests"] = [row_digest([w & 0xFFFFFFFF for w in row]) for row in words]
        return extras

    def score(self, sequences):
        """One forward pass over the left-padded batch of prompt + tokens (all but the last);
        the last len(tokens) rows of each predict its forced tokens."""
        torch = self.torch
        inputs = [list(p) + list(t[:-1]) for p, t in sequences]
        width = max(len(x) for x in inputs)
        ids = [[PAD_ID] * (width - len(x)) + x for x in inputs]
        mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in inputs], device="cuda")
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.no_grad():
            logits = self.model(input_ids=torch.tensor(ids, device="cuda"), attention_mask=mask,
                                position_ids=positions).logits.float()
        out = []
        for i, (_, tokens) in enumerate(sequences):
            rows = logits[i, width - len(tokens):]  # [len(tokens), vocab]
            logprobs = torch.log_softmax(rows, dim=-1)
            forced = torch.tensor(tokens, device="cuda").unsqueeze(-1)
            values = logprobs.gather(-1, forced).squeeze(-1)
            out.append((rows.argmax(dim=-1).cpu().tolist(), values.cpu().tolist(),
                        self._extras(rows, logprobs)))
        return out

    def shutdown(self):
        self.model = None


if __name__ == "__main__":
    sys.exit(run(HfAdapter()))

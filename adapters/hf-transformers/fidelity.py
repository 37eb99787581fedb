#!/usr/bin/env python3
"""fidelity.py: how close bih's logprobs are to HF transformers' fp32 forward of the same model.

    fidelity.py CHECKPOINT DUMP.json [DUMP.json ...] [--out result.json] [--tolerance 0.005]
    fidelity.py CHECKPOINT --save-pretrained OUT

A DUMP is a bih generation dump (harness/generation.cpp: {"sequences": [{"prompt", "tokens",
"logprob_bits", "logprobs"}]}; logprob_bits are float32 bit patterns as integers, "0x..." strings
are accepted too, and a dump with decimal "logprobs" only is read from those). Every sequence,
prompt + generated tokens, is teacher-forced alone (no padding) through HF twice: in fp32 (the
reference; bf16 weights widened exactly) and in bf16 (what HF itself would report). Over all
generated tokens it reports mean and max |bih - fp32 ref| and |HF bf16 - fp32 ref| of the sampled
token's logprob, and how often each one's greedy choice (bih's token, HF bf16's argmax) equals the
fp32 argmax.

Exit 1 when bih's mean error exceeds HF bf16's by more than --tolerance (nats, default 0.005).
Why 0.005: bih computes the same bf16 math as HF, so its error against fp32 should be about HF
bf16's own (measured at Qwen3-1.7B shape: bih 0.0217, HF bf16 0.0229); 0.005 is ~20% of that,
room for a different but equally valid bf16 rounding order, while a real bug is far outside it
(RoPE theta read as 10000 instead of 1e6 gave a mean error of 1.97).

--save-pretrained loads CHECKPOINT with transformers and writes it back with save_pretrained, to
test bih loading HF's own save. Needs torch and transformers (setup.sh) and a CUDA GPU.
"""

import argparse
import json
import math
import struct
import sys


def _float32(value):
    """A dump's logprob: an integer bit pattern, a "0x..." string, or a number; None for null."""
    if value is None:
        return None
    if isinstance(value, str):
        value = int(value, 16)
    elif isinstance(value, float):
        return struct.unpack("<f", struct.pack("<f", value))[0]
    return struct.unpack("<f", struct.pack("<I", value))[0]


def parse_dump(dump):
    """[(prompt, tokens, logprobs)] of a generation dump (the parsed JSON object)."""
    sequences = []
    for i, s in enumerate(dump["sequences"]):
        raw = s["logprob_bits"] if "logprob_bits" in s else s["logprobs"]
        if len(raw) != len(s["tokens"]):
            raise ValueError("sequence %d: %d logprobs for %d tokens" % (i, len(raw), len(s["tokens"])))
        sequences.append((list(s["prompt"]), list(s["tokens"]), [_float32(v) for v in raw]))
    return sequences


def summarize(errors):
    finite = [e for e in errors if e is not None and math.isfinite(e)]
    return {"mean": sum(finite) / len(finite) if finite else None,
            "max": max(finite) if finite else None,
            "count": len(finite), "non_finite": len(errors) - len(finite)}


def teacher_forced(model, torch, prompt, tokens):
    """(fp32 logprob of each generated token, argmax per generated position) of one forward."""
    ids = torch.tensor([prompt + tokens], device="cuda")
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()  # [T, V]
    rows = logits[len(prompt) - 1 : len(prompt) - 1 + len(tokens)]  # row t predicts token t+1
    logprobs = torch.log_softmax(rows, dim=-1)
    target = torch.tensor(tokens, device="cuda")
    return (logprobs.gather(-1, target[:, None])[:, 0].tolist(), rows.argmax(-1).tolist())


def load(path, torch, dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, attn_implementation="eager").to("cuda").eval()


def fidelity(checkpoint, sequences, tolerance):
    import torch

    ref_model = load(checkpoint, torch, torch.float32)
    ref = [teacher_forced(ref_model, torch, p, t) for p, t, _ in sequences]
    del ref_model
    torch.cuda.empty_cache()
    bf16_model = load(checkpoint, torch, torch.bfloat16)
    hf = [teacher_forced(bf16_model, torch, p, t) for p, t, _ in sequences]
    bih_err, hf_err, bih_agree, hf_agree, total = [], [], 0, 0, 0
    for (_, tokens, bih_lp), (ref_lp, ref_arg), (hf_lp, hf_arg) in zip(sequences, ref, hf):
        for k, token in enumerate(tokens):
            bih_err.append(None if bih_lp[k] is None else abs(bih_lp[k] - ref_lp[k]))
            hf_err.append(abs(hf_lp[k] - ref_lp[k]))
            bih_agree += token == ref_arg[k]
            hf_agree += hf_arg[k] == ref_arg[k]
            total += 1
    result = {"checkpoint": checkpoint, "sequences": len(sequences), "tokens": total,
              "bih_vs_fp32": summarize(bih_err), "hf_bf16_vs_fp32": summarize(hf_err),
              "greedy_agreement": {"bih": bih_agree, "hf_bf16": hf_agree, "of": total},
              "tolerance": tolerance}
    b, h = result["bih_vs_fp32"]["mean"], result["hf_bf16_vs_fp32"]["mean"]
    result["pass"] = b is not None and h is not None and b <= h + tolerance
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("dumps", nargs="*")
    parser.add_argument("--out")
    parser.add_argument("--tolerance", type=float, default=0.005)
    parser.add_argument("--save-pretrained", metavar="OUT")
    args = parser.parse_args(argv)
    if args.save_pretrained:
        import torch

        load(args.checkpoint, torch, torch.bfloat16).save_pretrained(args.save_pretrained)
        return 0
    if not args.dumps:
        parser.error("give at least one generation dump (or --save-pretrained OUT)")
    sequences = []
    for path in args.dumps:
        with open(path) as f:
            sequences += parse_dump(json.load(f))
    result = fidelity(args.checkpoint, sequences, args.tolerance)
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())

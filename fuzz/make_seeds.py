#!/usr/bin/env python3
"""make_seeds.py: writes the binary seeds of fuzz/corpus (a tiny GGUF and safetensors files).

A real model's files are megabytes; a seed only needs every structure the reader walks, so these
hold a few small tensors in each dtype the readers accept and one metadata value of each kind.
The outputs are committed; rerun this only to change them: python3 fuzz/make_seeds.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def safetensors(tensors, metadata):
    """tensors: [(name, dtype, shape, raw bytes)] laid out in order."""
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header with spaces to 8 bytes
    return struct.pack("<Q", len(text)) + text + data


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(alignment=32):
    kv = [
        ("general.architecture", 8, gguf_str("qwen3")),
        ("general.alignment", 4, struct.pack("<I", alignment)),
        ("qwen3.block_count", 4, struct.pack("<I", 1)),
        ("qwen3.rope.freq_base", 6, struct.pack("<f", 1e6)),
        ("general.flag", 7, struct.pack("<B", 1)),
        ("general.count64", 10, struct.pack("<Q", 7)),
        ("general.neg", 5, struct.pack("<i", -3)),
        ("general.scale", 12, struct.pack("<d", 0.5)),
        ("tokenizer.ggml.tokens", 9,
         struct.pack("<IQ", 8, 3) + gguf_str("<unk>") + gguf_str("<s>") + gguf_str("</s>")),
        ("tokenizer.ggml.token_type", 9, struct.pack("<IQiii", 5, 3, 2, 3, 3)),
        ("tokenizer.ggml.scores", 9, struct.pack("<IQfff", 6, 3, 0.0, 0.0, 0.0)),
    ]
    # (name, dims innermost first, ggml type, bytes per element)
    tensors = [("output_norm.weight", [4], 0, 4), ("token_embd.weight", [4, 3], 30, 2),
               ("blk.0.attn_q.weight", [2, 2], 1, 2)]
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, vtype, value in kv:
        head += gguf_str(key) + struct.pack("<I", vtype) + value
    offset, data = 0, b""
    for name, dims, ttype, esize in tensors:
        size = esize
        for d in dims:
            size *= d
        head += gguf_str(name) + struct.pack("<I", len(dims))
        head += b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", ttype, offset)
        data += bytes((i * 37 + 11) % 256 for i in range(size))
        data += b"\0" * (-len(data) % alignment)
        offset = len(data)
    head += b"\0" * (-len(head) % alignment)
    return head + data


def main():
    corpus = os.path.join(HERE, "corpus")
    one = struct.pack("<f", 1.0)
    write(os.path.join(corpus, "safetensors", "three-dtypes.safetensors"),
          safetensors([("model.norm.weight", "BF16", [4], b"\x80\x3f" * 4),
                       ("model.embed_tokens.weight", "F32", [2, 2], one * 4),
                       ("lm_head.weight", "F16", [3], b"\x00\x3c\x00\xbc\x00\x7c")],
                      {"format": "pt"}))
    write(os.path.join(corpus, "safetensors", "scalar-no-metadata.safetensors"),
          safetensors([("x", "BF16", [], b"\x80\x3f")], None))
    write(os.path.join(corpus, "safetensors", "empty.safetensors"), safetensors([], {}))
    write(os.path.join(corpus, "gguf", "tiny-v3.gguf"), gguf())
    write(os.path.join(corpus, "gguf", "tiny-align64.gguf"), gguf(alignment=64))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""
Bits per weight of a GGUF file's matrices, from the bytes the file stores: every 2-D tensor (the linear weights and
token_embd, which a tied model also multiplies by as its lm_head), n_bytes · 8 / n_elements. A developer tool for
`npm run bench:llama` (bench/llama.ts), which prints it beside safekeep's figure from its quantized store; needs gguf-py.

    python3 bench/llama/gguf_bpw.py MODEL.gguf   →   {"bpw": 4.5, "bytes": ..., "weights": ..., "types": {"Q4_0": 113}}
"""
import json
import sys

import gguf


def main() -> None:
    reader = gguf.GGUFReader(sys.argv[1])
    nbytes = 0
    weights = 0
    types: dict[str, int] = {}
    for t in reader.tensors:
        if len(t.shape) != 2:
            continue
        nbytes += int(t.n_bytes)
        weights += int(t.n_elements)
        name = t.tensor_type.name
        types[name] = types.get(name, 0) + 1
    print(json.dumps({"bpw": nbytes * 8 / weights, "bytes": nbytes, "weights": weights, "types": types}))


if __name__ == "__main__":
    main()

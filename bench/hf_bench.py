"""The Hugging Face side of `npm run bench:hf` (bench/hf.ts): the same work as safekeep, done as an HF user would.

Developer tool only: never imported by safekeep, never needed by `npm test`. Needs torch and transformers
(`pip install torch transformers safetensors`). One fresh process per measurement; prints one JSON line on stdout.

  python3 bench/hf_bench.py micro   --model DIR --threads T --reps R
      prefill: one forward of 1x512 tokens, every layer's hidden states (output_hidden_states=True), logits only at
               the last position (logits_to_keep=1) -- what safekeep's forward(hiddenAt 'all', logitsAt 'last') does;
      decode:  greedy generate from a 128-token prompt with a steering hook on model.model.layers[14] (subtracts
               alpha * v / |v| from its output = hidden[15], at every prompt and generated position, as `safekeep
               steer`), decode-only rate = 46 / (t(48 new) - t(2 new)).
  python3 bench/hf_bench.py extract --model DIR --threads T --ids IDS.json --out DIR
      the Table 1-2 extraction: for every condition in IDS.json ({"conditions": {name: [[ids], ...]}}), prompts
      sorted by length, right-padded batches (<= 16 prompts, <= 4096 padded tokens), one forward each with
      output_hidden_states=True and logits_to_keep=1, the final real token's hidden state at every layer kept.
      Writes OUT/<name>.f32 (float32 [n, L+1, d], rows in IDS.json order) and reports the forward time.
"""
import argparse
import json
import os
import sys
import time


def load_model(path, threads):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa").eval()
    return torch, model


def best(f, reps):
    b = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f()
        b = min(b, time.perf_counter() - t)
    return b


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return None


def micro(a):
    torch, model = load_model(a.model, a.threads)
    cfg = model.config
    V = cfg.vocab_size
    ids = torch.tensor([[3 + (i * 7919) % (V - 3) for i in range(512)]])
    out = {"threads": a.threads}
    with torch.inference_mode():
        model(ids[:, :64], output_hidden_states=True, logits_to_keep=1)  # warm-up
        s = best(lambda: model(ids, output_hidden_states=True, logits_to_keep=1), a.reps)
        out["prefillTps"] = 512 / s
        out["prefillLoad"] = loadavg()

        d = cfg.hidden_size
        v = torch.sin(torch.arange(d, dtype=torch.float32))
        v = v / v.norm()
        alpha = 4.0

        def steer(_m, _inp, o):
            if isinstance(o, tuple):
                return (o[0] - alpha * v,) + tuple(o[1:])
            return o - alpha * v

        hook = model.model.layers[14].register_forward_hook(steer)  # hidden[15]
        p = ids[:, :128]
        mask = torch.ones_like(p)

        def gen(n):
            return model.generate(p, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                  pad_token_id=0, eos_token_id=None)

        gen(4)
        t2, t48 = best(lambda: gen(2), a.reps), best(lambda: gen(48), a.reps)
        hook.remove()
        out["decodeSteerTps"] = 46 / (t48 - t2)
        out["decodeLoad"] = loadavg()
    import transformers
    out["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    print(json.dumps(out))


def extract(a):
    t_start = time.perf_counter()
    torch, model = load_model(a.model, a.threads)
    import numpy as np

    with open(a.ids) as f:
        conds = json.load(f)["conditions"]
    os.makedirs(a.out, exist_ok=True)
    t_loaded = time.perf_counter()
    forward_s = 0.0
    prompts = 0
    tokens = 0
    padded = 0
    # safekeep's hidden[L] is the last block's output BEFORE the final norm (HF's hidden_states[-1] is after it), so
    # the last block's output is taken from a forward hook, as the HF reference fixtures do
    last_block = {}
    model.model.layers[-1].register_forward_hook(lambda _m, _i, o: last_block.__setitem__("h", o[0] if isinstance(o, tuple) else o))
    with torch.inference_mode():
        for name, rows in conds.items():
            n = len(rows)
            L1 = model.config.num_hidden_layers + 1
            d = model.config.hidden_size
            res = np.zeros((n, L1, d), dtype=np.float32)
            order = sorted(range(n), key=lambda i: len(rows[i]))
            batches = []
            cur = []
            for i in order:
                width = len(rows[i])  # sorted: the newest row is the widest
                if cur and (len(cur) >= 16 or (len(cur) + 1) * width > 4096):
                    batches.append(cur)
                    cur = []
                cur.append(i)
            if cur:
                batches.append(cur)
            for b in batches:
                T = max(len(rows[i]) for i in b)
                ids = torch.zeros((len(b), T), dtype=torch.long)
                mask = torch.zeros((len(b), T), dtype=torch.long)
                for r, i in enumerate(b):
                    ids[r, : len(rows[i])] = torch.tensor(rows[i])
                    mask[r, : len(rows[i])] = 1
                t = time.perf_counter()
                o = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, logits_to_keep=1)
                last = torch.tensor([len(rows[i]) - 1 for i in b])
                hs = list(o.hidden_states[:-1]) + [last_block["h"]]
                h = torch.stack([x[torch.arange(len(b)), last] for x in hs], dim=1)  # [B, L+1, d]
                forward_s += time.perf_counter() - t
                res[b] = h.numpy()
                tokens += sum(len(rows[i]) for i in b)
                padded += len(b) * T
            prompts += n
            res.tofile(os.path.join(a.out, f"{name}.f32"))
    print(json.dumps({
        "threads": a.threads, "prompts": prompts, "tokens": tokens, "paddedTokens": padded,
        "forwardS": forward_s, "loadS": t_loaded - t_start, "totalS": time.perf_counter() - t_start, "load": loadavg(),
    }))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["micro", "extract", "check"])
    p.add_argument("--model")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ids")
    p.add_argument("--out")
    a = p.parse_args()
    if a.mode == "check":
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except Exception as e:  # noqa: BLE001 - any import failure means "no HF here"
            print(f"{type(e).__name__}: {e}")
            sys.exit(1)
        print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__}))
        return
    micro(a) if a.mode == "micro" else extract(a)


if __name__ == "__main__":
    main()

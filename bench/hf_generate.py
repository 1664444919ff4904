"""The Hugging Face side of `npm run bench:generate` (bench/generate.ts): the same prompts, greedy, exactly K new
tokens, done as an HF user would. Developer tool only (torch + transformers from pip); never needed by `npm test`.
One fresh process per measurement; prints one JSON line on stdout.

  python3 bench/hf_generate.py batch --model DIR --threads T --ids IDS.json --new-tokens K --batch B
      model.generate on batches of B prompts (in IDS.json order), left-padded with an attention mask,
      min_new_tokens = max_new_tokens = K, do_sample=False.
  python3 bench/hf_generate.py cb --model DIR --threads T --ids IDS.json --new-tokens K
      continuous batching: model.generate_batch over every prompt (paged attention), max_new_tokens = K, greedy,
      eos disabled so every request generates K tokens; cache sized for every sequence at once, 512-token steps.
"""
import argparse
import json
import time


def vmhwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except OSError:
        return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["batch", "cb"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    a = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    prompts = json.load(open(a.ids))
    K = a.new_tokens
    attn = "sdpa" if a.mode == "batch" else "paged|sdpa"
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, attn_implementation=attn).eval()
    generated = 0
    # generate_batch runs its loop in a thread that updates its tensors in place: no inference_mode around it
    with torch.inference_mode() if a.mode == "batch" else torch.no_grad():
        cfg = GenerationConfig(max_new_tokens=K, do_sample=False, eos_token_id=-1, pad_token_id=0)
        # on the CPU the cache cannot be sized from free GPU memory: room for every sequence at once, 512-token steps
        # (as safekeep's scheduler); blocks hold page_size = 256 tokens per layer
        from transformers.generation.continuous_batching import cache as cb_cache
        # it reads free memory from the accelerator (0 on the CPU): grant 8 GiB, far above what the sized cache needs
        cb_cache.PagedAttentionMemoryHandler.get_available_memory = lambda self: 8 * 2**30
        cbc = ContinuousBatchingConfig(num_blocks=sum((len(p) + K) // 256 + 1 for p in prompts) + 4, max_batch_tokens=512)
        # warm-up outside the timed part
        if a.mode == "batch":
            w = torch.tensor([prompts[0][:32]])
            model.generate(w, attention_mask=torch.ones_like(w), max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)
        else:
            model.generate_batch(inputs=[prompts[0][:32]], generation_config=GenerationConfig(max_new_tokens=2, do_sample=False, eos_token_id=-1, pad_token_id=0), continuous_batching_config=cbc)
        t0 = time.perf_counter()
        if a.mode == "batch":
            for i in range(0, len(prompts), a.batch):
                chunk = prompts[i:i + a.batch]
                width = max(len(p) for p in chunk)
                ids = torch.tensor([[0] * (width - len(p)) + p for p in chunk])
                mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
                out = model.generate(ids, attention_mask=mask, max_new_tokens=K, min_new_tokens=K, do_sample=False, pad_token_id=0)
                generated += (out.shape[1] - width) * len(chunk)
        else:
            outs = model.generate_batch(inputs=prompts, generation_config=cfg, continuous_batching_config=cbc)
            for r in outs.values():
                generated += len(r.generated_tokens)
        wall = time.perf_counter() - t0
    print(json.dumps({"mode": a.mode, "wallS": wall, "generated": generated, "tps": generated / wall, "peakRss": vmhwm(), "load": loadavg()}))


if __name__ == "__main__":
    main()

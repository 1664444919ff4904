#!/usr/bin/env python3
"""
Developer tool (NOT run by `npm test`): writes test/fixtures/sampling/processors.json, transformers' own processed
distributions for safekeep's sampling settings (src/engine/sample/).

For every logits row and every settings case, the processor list is the one `generate(do_sample=True, ...)` builds:
`model._get_logits_processor(GenerationConfig(...))` with `sequence_bias` (OpenAI's logit_bias as one-token
sequences), `repetition_penalty`, `temperature`, `top_k` (0 = off: HF's generate would otherwise default to 50),
`top_p`, `min_p`; OpenAI's frequency / presence penalties (which transformers does not have) are inserted right after
the sequence bias, computed as vLLM computes them (counts over the generated tokens only). The row's input_ids are
the prompt followed by the generated tokens (the repetition penalty's set); the "generated" part is what the
frequency / presence counts read.

Rows:
  recorded   the logits of test/fixtures/hf5/llama-default (transformers' tiny random llama, vocab 48) at the last
             position of the first 30 tokens of the hf5 prompt (24 as the prompt, 6 as "generated")
  synthetic  two rows of N(0, 2.5²) logits over a vocabulary of 256 (seeded), with their own histories

Per row × case: the softmax of the processed scores (float32, as generate computes them; filtered tokens 0), plus the
greedy choice (`do_sample=False`: the same list without the warpers, argmax). Every case is checked for borderline
cuts: the set kept by top-k / top-p / min-p in float32 must equal the set kept when the same list runs in float64
(otherwise a rounding of the cumulative sums could decide membership and no implementation could match within 1e-6).

Usage (needs torch and transformers >= 5: `pip install 'torch<2.14' transformers`):
    python3 scripts/hf-fixtures/sampling.py [--out test/fixtures/sampling/processors.json]
"""
import argparse
import json
import sys
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, GenerationConfig, LogitsProcessor, LogitsProcessorList
from transformers.generation.logits_process import SequenceBiasLogitsProcessor

ROOT = Path(__file__).resolve().parents[2]
HF5 = ROOT / 'test' / 'fixtures' / 'hf5'

CASES = {
    'temperature-0.7': dict(temperature=0.7),
    'temperature-2': dict(temperature=2.0),
    'top-k-5': dict(temperature=1.0, top_k=5),
    'top-k-1': dict(temperature=1.0, top_k=1),
    'top-p-0.8': dict(temperature=1.0, top_p=0.8),
    'top-p-0.3': dict(temperature=0.9, top_p=0.3),
    'top-p-1e-9': dict(temperature=1.0, top_p=1e-9),
    'min-p-0.1': dict(temperature=1.0, min_p=0.1),
    'min-p-0.3-t1.5': dict(temperature=1.5, min_p=0.3),
    'repetition-1.3': dict(temperature=1.0, repetition_penalty=1.3),
    'repetition-0.8': dict(temperature=1.0, repetition_penalty=0.8),
    'logit-bias': dict(temperature=1.0, logit_bias={3: 5.0, 7: -100.0, 11: 2.5}),
    'frequency-presence': dict(temperature=1.0, frequency_penalty=0.7, presence_penalty=0.4),
    'negative-penalties': dict(temperature=1.0, frequency_penalty=-0.5, presence_penalty=-1.0),
    'all': dict(temperature=0.8, top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.2,
                frequency_penalty=0.3, presence_penalty=0.2, logit_bias={5: 3.0, 2: -2.0}),
    'all-tight': dict(temperature=1.3, top_k=8, top_p=0.6, min_p=0.2, repetition_penalty=1.5,
                      frequency_penalty=0.5, presence_penalty=0.5, logit_bias={1: 4.0}),
    'greedy-penalised': dict(temperature=0.0, repetition_penalty=1.5, frequency_penalty=0.5, logit_bias={4: 1.0}),
}


class OpenAiPenalties(LogitsProcessor):
    """vLLM's frequency / presence penalties over the generated tokens (input_ids[:, prompt_len:])."""

    def __init__(self, frequency, presence, prompt_len):
        self.frequency, self.presence, self.prompt_len = frequency, presence, prompt_len

    def __call__(self, input_ids, scores):
        counts = torch.zeros_like(scores)
        gen = input_ids[:, self.prompt_len:]
        counts.scatter_add_(1, gen, torch.ones_like(gen, dtype=scores.dtype))
        return scores - self.frequency * counts - self.presence * (counts > 0).to(scores.dtype)


def processors(model, case, prompt_len, sample):
    cfg = GenerationConfig(
        do_sample=sample, num_beams=1, eos_token_id=None, pad_token_id=None, bos_token_id=None,
        temperature=case['temperature'] if sample else None,
        top_k=case.get('top_k', 0) if sample else None,
        top_p=case.get('top_p', 1.0) if sample else None,
        min_p=case.get('min_p') if sample else None,
        repetition_penalty=case.get('repetition_penalty'),
        sequence_bias=[[[int(t)], float(b)] for t, b in case['logit_bias'].items()] if 'logit_bias' in case else None,
    )
    hf = model._get_logits_processor(generation_config=cfg, input_ids_seq_length=prompt_len, device='cpu')
    out = LogitsProcessorList(list(hf))
    if case.get('frequency_penalty') or case.get('presence_penalty'):
        at = next((i + 1 for i, p in enumerate(out) if isinstance(p, SequenceBiasLogitsProcessor)), 0)
        out.insert(at, OpenAiPenalties(case.get('frequency_penalty', 0.0), case.get('presence_penalty', 0.0), prompt_len))
    return out


def run_case(model, case, logits, input_ids, prompt_len):
    sample = case['temperature'] > 0
    procs = processors(model, case, prompt_len, sample)
    names = [type(p).__name__ for p in procs]
    scores = procs(input_ids, logits.clone().unsqueeze(0))[0]
    scores64 = procs(input_ids, logits.double().clone().unsqueeze(0))[0]
    kept, kept64 = torch.isfinite(scores), torch.isfinite(scores64)
    if not torch.equal(kept, kept64):
        sys.exit(f'borderline cut: float32 and float64 keep different tokens ({names}); pick other logits')
    greedy_procs = processors(model, case, prompt_len, False)
    greedy_scores = greedy_procs(input_ids, logits.clone().unsqueeze(0))[0]
    top2 = torch.topk(greedy_scores, 2).values
    if float(top2[0] - top2[1]) < 1e-3:
        sys.exit('greedy choice without a clear margin; pick other logits')
    probs = torch.softmax(scores, dim=-1)
    return {
        'processors': names,
        'probs': [round(float(x), 10) for x in probs],
        'greedy': int(torch.argmax(greedy_scores)),
        'kept': int(kept.sum()),
    }


def recorded_row():
    model = AutoModelForCausalLM.from_pretrained(HF5 / 'llama-default' / 'model', dtype=torch.float32).eval()
    ids = json.loads((HF5 / 'index.json').read_text())['prompt'][:30]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1].float()
    return model, {'name': 'recorded', 'logits': logits, 'prompt': ids[:24], 'generated': ids[24:]}


def synthetic_rows(seed=7, vocab=256):
    g = torch.Generator().manual_seed(seed)
    rows = []
    for k in range(2):
        logits = torch.randn(vocab, generator=g) * 2.5
        prompt = torch.randint(0, vocab, (20,), generator=g).tolist()
        generated = torch.randint(0, 16, (8,), generator=g).tolist()  # repeats among the low ids the cases bias
        rows.append({'name': f'synthetic-{k}', 'logits': logits, 'prompt': prompt, 'generated': generated})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', default=str(ROOT / 'test' / 'fixtures' / 'sampling' / 'processors.json'))
    args = ap.parse_args()
    torch.manual_seed(0)
    model, rec = recorded_row()
    rows = []
    for row in [rec, *synthetic_rows()]:
        ids = torch.tensor([row['prompt'] + row['generated']])
        results = {name: run_case(model, case, row['logits'], ids, len(row['prompt'])) for name, case in CASES.items()}
        rows.append({'name': row['name'], 'logits': [float(x) for x in row['logits']], 'prompt': row['prompt'],
                     'generated': row['generated'], 'cases': results})
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    cases = {name: {k: ({str(t): b for t, b in v.items()} if k == 'logit_bias' else v) for k, v in c.items()} for name, c in CASES.items()}
    doc = {'transformers': transformers.__version__, 'torch': torch.__version__, 'cases': cases, 'rows': rows}
    out.write_text(json.dumps(doc, separators=(',', ':')) + '\n')
    print(f'wrote {out} ({out.stat().st_size} bytes): {len(rows)} rows × {len(CASES)} cases')
    print('processors of "all":', rows[0]['cases']['all']['processors'])
    for row in rows:
        print(row['name'], {n: (r['kept'], r['greedy']) for n, r in row['cases'].items()})


if __name__ == '__main__':
    main()

/**
 * `check: probe` — the refusal-probe skill (stage `input`): a trained refusal probe (src/experiments/probe/) reads
 * hidden[ℓ] at the last prompt position of the request and flags it when w·hidden[ℓ] + bias > threshold (or is NaN).
 *
 * - The skill's `direction:` resource is either a probe file written by `safekeep probe train` (format
 *   "safekeep-probe"; its weights file must be a resource too) or `{"vector": [d numbers]}` (a plain direction: the
 *   projection on its unit vector, bias 0). The skill's `layer:` must equal the probe's layer; the skill's
 *   `threshold:` is the decision threshold.
 * - Hidden states come from `env.hidden` (check.ts). With `sharedPrefill` (below) they come from the agent's OWN
 *   prefill: the provider runs the agent call itself, with the probe deciding right after the prefill; a flagged call
 *   stops there (no decoding), a passed call's answer is kept and handed to the agent turn that asks for exactly this
 *   prompt next — so the skill costs no model call. Any other provider (e.g. `engineHiddenStates`) works too, with
 *   a forward pass of its own.
 */
import { readRegularText } from '../../checkpoint/regular-file.ts';
import type { ToolSpec } from '../../data/types.ts';
import { probeScore, readProbe } from '../../data/probe-file.ts';
import { SafekeepError } from '../../util/errors.ts';
import { ProbeGuard } from '../../guard/probe.ts';
import type { ChatBackend, ChatCall, ChatMessage, ChatReply } from '../../guard/types.ts';
import type { CheckFn, HiddenStateProvider } from '../check.ts';
import type { Skill } from '../skill.ts';
import { SkillFileError } from '../skill-file.ts';

/** What scores a hidden state: score = w·hidden[layer] + bias. */
export interface SkillProbe {
  w: Float32Array;
  bias: number;
  layer: number;
  dModel: number;
  threshold: number;
  /** where it came from (for messages) */
  source: string;
}

const cache = new Map<string, SkillProbe>();

/** The probe a `check: probe` skill names, validated against its SKILL.md (one error naming the file and field). */
export function loadSkillProbe(skill: Skill): SkillProbe {
  const spec = skill.probe;
  if (skill.check !== 'probe' || !spec) throw new SkillFileError(skill.file, 'check', 'not a probe skill', 'use a skill with "check: probe"');
  const key = `${skill.file}\0${spec.direction}\0${spec.layer}\0${spec.threshold}`;
  const hit = cache.get(key);
  if (hit) return hit;
  // a regular file of bounded size (a direction is d_model numbers; a probe file names its weights file)
  const text = readRegularText(spec.direction, 16 * 1024 * 1024);
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new SkillFileError(skill.file, 'direction', `${spec.direction} is not valid JSON (${(e as Error).message})`, 'name a probe file from safekeep probe train or {"vector": [...]}');
  }
  let out: SkillProbe;
  if ((raw as { format?: unknown } | null)?.format === 'safekeep-probe') {
    const p = readProbe(spec.direction);
    const weights = [...skill.resources.values()].some((f) => f.endsWith(`/${p.weights}`));
    if (!weights) throw new SkillFileError(skill.file, 'resources', `the probe's weights file ${p.weights} is not listed`, `add '${p.weights}' to "resources: [...]"`);
    if (p.layer !== spec.layer) throw new SkillFileError(skill.file, 'layer', `${spec.layer} differs from the probe's layer ${p.layer}`, `write "layer: ${p.layer}"`);
    out = { w: p.w, bias: p.bias, layer: p.layer, dModel: p.dModel, threshold: spec.threshold, source: spec.direction };
  } else {
    const v = (raw as { vector?: unknown } | null)?.vector;
    if (!Array.isArray(v) || v.length === 0 || !v.every((x) => typeof x === 'number' && Number.isFinite(x))) {
      throw new SkillFileError(skill.file, 'direction', `${spec.direction} holds neither a safekeep probe nor {"vector": [numbers]}`, 'write a probe with safekeep probe train, or {"vector": [...]}');
    }
    const n = Math.sqrt((v as number[]).reduce((s, x) => s + x * x, 0));
    if (!(n > 0)) throw new SkillFileError(skill.file, 'direction', 'the vector is zero', 'give a non-zero direction');
    out = { w: Float32Array.from(v as number[], (x) => x / n), bias: 0, layer: spec.layer, dModel: v.length, threshold: spec.threshold, source: spec.direction };
  }
  cache.set(key, out);
  return out;
}

/** The skill's probe as a guardedRespond probe (methods refusal-probe / safekeep+probe). */
export function probeGuardFromSkill(skill: Skill): ProbeGuard {
  const p = loadSkillProbe(skill);
  return new ProbeGuard({ w: p.w, bias: p.bias, layer: p.layer, dModel: p.dModel, threshold: { value: p.threshold } });
}

/** A provider that can let the probe decide inside the prefill (sharedPrefill); others just return hidden states. */
interface DecidingHiddenStateProvider extends HiddenStateProvider {
  lastTokenHidden(messages: readonly ChatMessage[], tools: readonly ToolSpec[], halt?: (hidden: Float32Array) => boolean): ReturnType<HiddenStateProvider['lastTokenHidden']>;
}

export const probeCheck: CheckFn = async (skill, event, env) => {
  const t0 = performance.now();
  const p = loadSkillProbe(skill);
  if (!env.hidden) throw new SafekeepError(`skill ${skill.name} (check: probe) reads hidden states: it needs a local engine (--model DIR), not an endpoint`);
  let score = Number.NaN;
  let scoreMs = 0;
  const decide = (h: Float32Array): boolean => {
    const s0 = performance.now();
    score = probeScore(p, h);
    scoreMs = performance.now() - s0;
    // a score that is no number (NaN hidden states: an f16 overflow) is risky: the check fails closed
    return !(score <= p.threshold);
  };
  const provider = env.hidden as DecidingHiddenStateProvider;
  const r = await provider.lastTokenHidden(event.messages, event.tools, decide);
  if (r.dModel !== p.dModel || p.layer > r.numLayers) throw new SafekeepError(`skill ${skill.name}: probe for d_model ${p.dModel} at layer ${p.layer}, model has d_model ${r.dModel} and ${r.numLayers} layers`);
  if (Number.isNaN(score)) decide(r.hidden);
  const risky = !(score <= p.threshold);
  return {
    risky,
    reason: Number.isNaN(score)
      ? `the refusal probe's score at layer ${p.layer} is not a number (non-finite hidden states): flagged, failing closed`
      : risky
      ? `the refusal probe scores the request ${score.toFixed(3)} at layer ${p.layer}, above its threshold ${p.threshold.toFixed(3)}`
      : `probe score ${score.toFixed(3)} ≤ threshold ${p.threshold.toFixed(3)}`,
    evidence: [],
    verdict: null,
    score,
    raw: '',
    tokens: 0,
    // with a shared prefill the provider's time is the agent call's; the check's own cost is the scoring
    latencyMs: provider instanceof SharedPrefill ? scoreMs : performance.now() - t0,
  };
};

/**
 * The agent backend and a hidden-state provider that share one forward pass: `hidden.lastTokenHidden(messages,
 * tools, halt)` runs the AGENT call for that prompt (maxTokens as the agent's) with `halt` deciding after the
 * prefill; when it does not halt, the answer is kept, and the next `backend.chat` agent call with the same messages,
 * tools and budget returns it instead of running the model again. Everything else goes to the inner backend.
 */
export class SharedPrefill implements DecidingHiddenStateProvider {
  readonly backend: ChatBackend;
  /** the last probed call's answer, by its key (one slot: a request whose input stage ended otherwise is dropped) */
  private pending: { key: string; reply: ChatReply } | null = null;
  /** agent calls answered from a probed prefill (no second forward) */
  reused = 0;

  constructor(private readonly inner: ChatBackend & { activations?: boolean }, private readonly agentMaxTokens: number, private readonly shape: { numLayers: number; dModel: number }) {
    if (!inner.activations) throw new SafekeepError(`${inner.name}: a shared prefill needs the local engine`);
    const self = this;
    this.backend = {
      name: inner.name,
      callFormat: inner.callFormat,
      activations: true,
      chat(call: ChatCall): Promise<ChatReply> {
        if (call.purpose === 'agent' && !call.inspect && !call.prefix) {
          const key = SharedPrefill.key(call.messages, call.tools ?? [], call.maxTokens);
          const hit = self.pending;
          if (hit && hit.key === key) {
            self.pending = null;
            self.reused++;
            return Promise.resolve(hit.reply);
          }
        }
        return inner.chat(call);
      },
    };
  }

  static key(messages: readonly ChatMessage[], tools: readonly ToolSpec[], maxTokens: number): string {
    return JSON.stringify([messages, tools, maxTokens]);
  }

  async lastTokenHidden(messages: readonly ChatMessage[], tools: readonly ToolSpec[], halt?: (hidden: Float32Array) => boolean) {
    let hidden: Float32Array | null = null;
    let halted = false;
    const reply = await this.inner.chat({
      messages: [...messages], tools, maxTokens: this.agentMaxTokens, purpose: 'agent',
      inspect: (h) => {
        hidden = h;
        halted = halt ? halt(h) : false;
        return halted;
      },
    });
    if (!hidden) throw new SafekeepError(`${this.inner.name}: the agent call reported no prefill hidden states`);
    this.pending = halted ? null : { key: SharedPrefill.key(messages, tools, this.agentMaxTokens), reply };
    return { numLayers: this.shape.numLayers, dModel: this.shape.dModel, hidden: hidden as Float32Array };
  }
}

/**
 * A chat request's sampling fields → the engine's SamplingSettings (engine/sample/settings.ts) and its number of
 * choices: OpenAI's `temperature`, `top_p`, `n`, `seed`, `frequency_penalty`, `presence_penalty`, `logit_bias`, and
 * vLLM's extras in the body, `top_k`, `min_p`, `repetition_penalty`, with OpenAI's and vLLM's ranges (a 400 naming
 * the field otherwise; `null` is absent, as OpenAI reads it).
 *
 * Greedy unless the request names a temperature above 0 — OpenAI's default temperature is 1, this server's is greedy
 * (a guard's verdict and a research run must not vary between calls unless asked to). So a filter (`top_p` < 1,
 * `top_k`, `min_p`) or `n` > 1 in a request that names no temperature is a 400 saying so, not a silent greedy answer;
 * with an explicit `"temperature": 0` a filter changes nothing (the greedy limit) and n choices are one answer n
 * times, as in vLLM. Penalties and `logit_bias` apply to
 * greedy requests too (HF and vLLM take the argmax of the penalised logits). A sampled request without `seed` gets a
 * drawn one, which the response reports, so any answer can be replayed; choice i uses seed + i.
 */
import { badRequest } from '../http/errors.ts';
import { checkSampling, drawSeed, hasPenalties, isGreedy, type SamplingNames, type SamplingSettings } from '../engine/sample/settings.ts';
import { isSafekeepError } from '../util/errors.ts';

/** the most choices a request may ask for (each is a generation of up to max_tokens) */
export const MAX_CHOICES = 16;
/** the most logit_bias entries (each is applied at every step of the request's rows) */
export const MAX_LOGIT_BIAS = 1024;

/** how errors name each setting: by its body field */
const FIELD_NAMES: SamplingNames = {
  temperature: '"temperature"', topK: '"top_k"', topP: '"top_p"', minP: '"min_p"', repetitionPenalty: '"repetition_penalty"',
  frequencyPenalty: '"frequency_penalty"', presencePenalty: '"presence_penalty"', logitBias: '"logit_bias"', seed: '"seed"',
};

export interface RequestSampling {
  /** absent: greedy with no penalties, as every request decoded before sampling existed */
  settings?: SamplingSettings;
  /** choices (OpenAI's `n`, default 1) */
  n: number;
  /** the seed was drawn here (the request named none) */
  seedDrawn: boolean;
}

export interface SamplingFieldOptions {
  /** the model's vocabulary (bounds the logit_bias ids); none = not checked here */
  vocabSize?: number;
  maxChoices?: number;
  /** a fresh seed (default: drawSeed) */
  draw?: () => number;
}

const show = (v: unknown) => JSON.stringify(v)?.slice(0, 40) ?? String(v);
const given = (v: unknown) => v !== undefined && v !== null;

/** the request's sampling (throws a 400 HttpError naming the first bad field) */
export function samplingFields(b: Record<string, unknown>, o: SamplingFieldOptions = {}): RequestSampling {
  const num = (key: string, lo: number, hi: number, integer = false): number | undefined => {
    const v = b[key];
    if (!given(v)) return undefined;
    if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi || (integer && !Number.isInteger(v))) {
      throw badRequest(`"${key}" must be ${integer ? 'an integer' : 'a number'} from ${lo} to ${hi}, got ${show(v)}`);
    }
    return v;
  };
  const s: SamplingSettings = {};
  const set = <K extends keyof SamplingSettings>(k: K, v: SamplingSettings[K] | undefined) => { if (v !== undefined) s[k] = v; };
  set('temperature', num('temperature', 0, 2));
  set('topP', num('top_p', 0, 1));
  const topK = num('top_k', -1, 2 ** 31 - 1, true);
  if (topK !== undefined && topK > 0) s.topK = topK; // vLLM: -1 and 0 both mean off
  set('minP', num('min_p', 0, 1));
  const rep = b.repetition_penalty;
  if (given(rep) && (typeof rep !== 'number' || !Number.isFinite(rep) || !(rep > 0) || rep > 100)) throw badRequest(`"repetition_penalty" must be a number above 0 and at most 100 (1 = off), got ${show(rep)}`);
  set('repetitionPenalty', given(rep) ? rep as number : undefined);
  set('frequencyPenalty', num('frequency_penalty', -2, 2));
  set('presencePenalty', num('presence_penalty', -2, 2));
  set('seed', num('seed', Number.MIN_SAFE_INTEGER, Number.MAX_SAFE_INTEGER, true));
  set('logitBias', logitBias(b.logit_bias));
  const n = num('n', 1, o.maxChoices ?? MAX_CHOICES, true) ?? 1;
  try {
    checkSampling(s, FIELD_NAMES, o.vocabSize);
  } catch (e) {
    throw isSafekeepError(e) ? badRequest(e.message) : e;
  }
  if (!given(b.temperature)) {
    const filters = [['top_p', (s.topP ?? 1) < 1], ['top_k', s.topK !== undefined], ['min_p', !!s.minP], ['n', n > 1]].filter(([, on]) => on).map(([k]) => `"${k}"`);
    if (filters.length) throw badRequest(`${filters.join(', ')} ${filters.length > 1 ? 'need' : 'needs'} "temperature": this server decodes greedily when a request names no temperature (OpenAI's default is 1; send "temperature": 1 to sample)`);
  }
  if (isGreedy(s) && !hasPenalties(s)) return { n, seedDrawn: false }; // greedy and unpenalised: the plain path, as before
  const seedDrawn = !isGreedy(s) && s.seed === undefined;
  if (seedDrawn) s.seed = (o.draw ?? drawSeed)();
  if (s.seed !== undefined && !Number.isSafeInteger(s.seed + (n - 1))) throw badRequest(`"seed" + "n" − 1 must stay a 53-bit integer, got seed ${s.seed}`);
  return { settings: s, n, seedDrawn };
}

/** OpenAI's logit_bias: an object of token ids (decimal strings) to biases from −100 to 100 */
function logitBias(v: unknown): Record<number, number> | undefined {
  if (!given(v)) return undefined;
  if (typeof v !== 'object' || Array.isArray(v)) throw badRequest('"logit_bias" must be an object of token ids to numbers from -100 to 100');
  const entries = Object.entries(v as Record<string, unknown>);
  if (entries.length > MAX_LOGIT_BIAS) throw badRequest(`"logit_bias" may have at most ${MAX_LOGIT_BIAS} entries, got ${entries.length}`);
  const out: Record<number, number> = {};
  for (const [k, x] of entries) {
    if (!/^\d{1,9}$/.test(k)) throw badRequest(`"logit_bias": ${show(k)} is not a token id`);
    if (typeof x !== 'number' || !Number.isFinite(x) || x < -100 || x > 100) throw badRequest(`"logit_bias".${k} must be a number from -100 to 100, got ${show(x)}`);
    out[Number(k)] = x;
  }
  return out;
}

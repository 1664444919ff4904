/**
 * Every environment variable safekeep reads, declared once (name, values, meaning; the README lists them from here)
 * and read only at the CLI edge: `engineEnv` turns the engine's into `EngineOptions` defaults that flags override,
 * the other readers here turn the rest into the options the library takes. Library code never reads the environment.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import type { DataDirs } from '../data/locate.ts';
import { ATTENTION_IMPLS, QUANT_BLOCKS, type EngineOptions } from '../engine/engine-config.ts';
import type { HubTimeouts } from '../hub/api.ts';
import type { HubSettings } from '../hub/resolve.ts';
import { SafekeepError } from '../util/errors.ts';

interface EnvVarDef {
  name: string;
  value: string;
  help: string;
}

export const ENV_VARS: readonly EnvVarDef[] = [
  { name: 'SAFEKEEP_CACHE', value: 'DIR', help: 'graph and quantized-weight cache root (default ~/.cache/safekeep)' },
  { name: 'SAFEKEEP_THREADS', value: 'N', help: 'intra-op threads when --threads is not given (default: one per physical core within the CPU quota)' },
  { name: 'SAFEKEEP_ATTENTION', value: 'onnx|mha|matmul', help: 'multi-token attention kernel: the ONNX Attention op (cpu default), onnxruntime\'s MultiHeadAttention (cuda default) or standard ops (webgpu default)' },
  { name: 'SAFEKEEP_FUSE', value: '0', help: '0: q/k/v and gate/up as separate Gemms instead of one concatenated Gemm each' },
  { name: 'SAFEKEEP_QUANT_SCHEME', value: 'sym|asym', help: 'q8/q4 block quantization (default sym)' },
  { name: 'SAFEKEEP_QUANT_ACCURACY', value: '0..4', help: 'q8/q4 MatMulNBits accuracy level (default 4: int8 activations)' },
  { name: 'SAFEKEEP_QUANT_BLOCK', value: '32|64|128', help: 'q8/q4 weights per block (default 32; 64 with sym = 4.5 / 8.5 bits per weight, as llama.cpp\'s Q4_0 / Q8_0)' },
  { name: 'SAFEKEEP_SPIN', value: '1', help: 'session workers spin within a run (faster on a machine of your own, slower on a shared one)' },
  { name: 'SAFEKEEP_QUIET', value: '1', help: 'no progress lines on stderr' },
  { name: 'SAFEKEEP_MODELS', value: 'DIR', help: 'where `safekeep pull` and hub ids put checkpoints (default models/)' },
  { name: 'SAFEKEEP_DATA', value: 'DIR', help: 'looked in first for data sets, and where `safekeep data pull` writes (default data/)' },
  { name: 'SAFEKEEP_SHARED', value: 'DIR', help: 'the read-only shared folder (data sets, test fixtures; default ../shared)' },
  { name: 'SAFEKEEP_CHROMIUM', value: 'PATH', help: 'tests: the Chromium that renders the HTML report' },
  { name: 'SAFEKEEP_PYTHON', value: 'PATH', help: 'tests: the Python that runs the research-API example (needs its openai package; default python3)' },
  { name: 'SAFEKEEP_DEBUG', value: '1', help: 'print the stack of an internal error' },
  { name: 'HF_ENDPOINT', value: 'URL', help: 'Hugging Face hub mirror for `pull`, `data pull` and hub ids (default https://huggingface.co)' },
  { name: 'HF_TOKEN', value: 'TOKEN', help: 'hub token for gated or private repos (sent to the hub only, never to its file CDN)' },
  { name: 'HUGGING_FACE_HUB_TOKEN', value: 'TOKEN', help: 'the older name of HF_TOKEN, used when HF_TOKEN is unset' },
  { name: 'HF_HOME', value: 'DIR', help: 'Hugging Face home; the hub cache is $HF_HOME/hub (default $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface)' },
  { name: 'HF_HUB_CACHE', value: 'DIR', help: 'the Hugging Face hub cache (models--org--name/snapshots/…), shared with Python: hub ids found there are used in place' },
  { name: 'HF_HUB_OFFLINE', value: '1', help: 'never reach the hub: hub ids resolve only from models/ and the hub cache' },
  { name: 'HF_HUB_ETAG_TIMEOUT', value: 'SECONDS', help: 'time limit for a hub file listing (default 10)' },
  { name: 'HF_HUB_DOWNLOAD_TIMEOUT', value: 'SECONDS', help: 'time limit for a download\'s response and for each next chunk of it (default 10)' },
  { name: 'OPENAI_API_KEY', value: 'KEY', help: 'endpoint API key of `guard eval`, `s3 …` when --api-key-env is not given (not `serve`: it forwards the client\'s own key)' },
];

/** The engine options the environment sets (flags override them); unset or invalid values set nothing. */
export function engineEnv(env: NodeJS.ProcessEnv = process.env): EngineOptions {
  const o: EngineOptions = {};
  if (env.SAFEKEEP_CACHE) o.cacheDir = env.SAFEKEEP_CACHE;
  const threads = Number(env.SAFEKEEP_THREADS);
  if (env.SAFEKEEP_THREADS && Number.isInteger(threads) && threads > 0) o.threads = threads;
  const attention = ATTENTION_IMPLS.find((a) => a === env.SAFEKEEP_ATTENTION);
  if (attention) o.attention = attention;
  if (env.SAFEKEEP_FUSE === '0') o.fuse = false;
  const scheme = env.SAFEKEEP_QUANT_SCHEME;
  if (scheme === 'sym' || scheme === 'asym') o.quantScheme = scheme;
  const acc = env.SAFEKEEP_QUANT_ACCURACY;
  if (acc !== undefined && ['0', '1', '2', '3', '4'].includes(acc)) o.quantAccuracy = Number(acc);
  const block = QUANT_BLOCKS.find((b) => String(b) === env.SAFEKEEP_QUANT_BLOCK);
  if (block !== undefined) o.quantBlock = block;
  if (env.SAFEKEEP_SPIN === '1') o.spin = true;
  if (env.SAFEKEEP_QUIET) o.quiet = true;
  return o;
}

/** no progress lines on stderr */
export function quietEnv(env: NodeJS.ProcessEnv = process.env): boolean {
  return Boolean(env.SAFEKEEP_QUIET);
}

/** SAFEKEEP_DATA and SAFEKEEP_SHARED as data-folder overrides */
export function dataDirsEnv(env: NodeJS.ProcessEnv = process.env): DataDirs {
  return { ...(env.SAFEKEEP_DATA ? { data: env.SAFEKEEP_DATA } : {}), ...(env.SAFEKEEP_SHARED ? { shared: env.SAFEKEEP_SHARED } : {}) };
}

/** huggingface_hub's reading of a boolean variable */
function envTrue(v: string | undefined): boolean {
  return v !== undefined && ['1', 'on', 'yes', 'true'].includes(v.trim().toLowerCase());
}

/** A time limit in seconds (a flag or a variable) as milliseconds; anything but a positive finite number is an error. */
export function parseTimeoutSeconds(name: string, v: string): number {
  const s = Number(v);
  if (v.trim() === '' || !Number.isFinite(s) || s <= 0 || s > 86_400) throw new SafekeepError(`${name} ${JSON.stringify(v.slice(0, 40))}: expected a number of seconds > 0 (at most 86400)`);
  return Math.round(s * 1000);
}

/** HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT (seconds) as hub time limits; unset or empty sets nothing. */
export function hubTimeoutsEnv(env: NodeJS.ProcessEnv = process.env): HubTimeouts {
  const t: HubTimeouts = {};
  if (env.HF_HUB_ETAG_TIMEOUT) t.metadataMs = parseTimeoutSeconds('HF_HUB_ETAG_TIMEOUT', env.HF_HUB_ETAG_TIMEOUT);
  if (env.HF_HUB_DOWNLOAD_TIMEOUT) t.downloadMs = parseTimeoutSeconds('HF_HUB_DOWNLOAD_TIMEOUT', env.HF_HUB_DOWNLOAD_TIMEOUT);
  return t;
}

/** The Hugging Face hub cache as huggingface_hub finds it: HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub, ~/.cache/huggingface/hub. */
export function hfCacheEnv(env: NodeJS.ProcessEnv = process.env): string {
  if (env.HF_HUB_CACHE) return env.HF_HUB_CACHE;
  if (env.HF_HOME) return join(env.HF_HOME, 'hub');
  return join(env.XDG_CACHE_HOME || join(homedir(), '.cache'), 'huggingface', 'hub');
}

/**
 * SAFEKEEP_MODELS, HF_ENDPOINT and HF_TOKEN (or HUGGING_FACE_HUB_TOKEN), the hub cache (HF_HUB_CACHE / HF_HOME),
 * HF_HUB_OFFLINE and the HF_HUB_*_TIMEOUT limits as hub settings, SAFEKEEP_QUIET as no download
 * progress; empty values set nothing
 */
export function hubEnv(env: NodeJS.ProcessEnv = process.env): HubSettings {
  const token = env.HF_TOKEN || env.HUGGING_FACE_HUB_TOKEN;
  const timeouts = hubTimeoutsEnv(env);
  return {
    ...(env.SAFEKEEP_MODELS ? { modelsDir: env.SAFEKEEP_MODELS } : {}),
    ...(env.HF_ENDPOINT ? { endpoint: env.HF_ENDPOINT } : {}),
    ...(token ? { token } : {}),
    ...(quietEnv(env) ? { progress: false } : {}),
    ...(Object.keys(timeouts).length ? { timeouts } : {}),
    hfCache: hfCacheEnv(env),
    ...(envTrue(env.HF_HUB_OFFLINE) ? { offline: true } : {}),
  };
}

/**
 * The API key in the environment variable a flag names (`--api-key-env VAR`): a named variable that is unset or
 * empty is a mistake worth one clear error; without the flag, `fallback` (e.g. OPENAI_API_KEY) when set, else no key.
 * Resolved here so the library gets the key itself and decides only where it may go (each upstream its own key).
 */
export function apiKeyFromEnv(flag: string, name: string | undefined, fallback?: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (name !== undefined) {
    const v = env[name];
    if (!v) throw new SafekeepError(`--${flag} ${name}: that environment variable is not set`);
    return v;
  }
  return (fallback ? env[fallback] : undefined) || undefined;
}

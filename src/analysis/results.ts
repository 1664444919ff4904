/**
 * `AnalysisResults`: the plain-JSON outcome of the paper's analyses for one model, the only input of the report
 * (`writeReport` in src/report). Every number carries its interval and n where it has one. Layer arrays have
 * L+1 entries (index 0 = embedding output).
 */

/** AUROC with its paired-bootstrap percentile interval. */
export interface AurocCI {
  auroc: number;
  lo: number;
  hi: number;
  /** evaluation rows */
  n: number;
}

/** A difference (e.g. configuration − chatbot) with its paired-bootstrap interval. */
export interface DiffCI {
  diff: number;
  lo: number;
  hi: number;
}

export interface LayerCurve {
  /** configuration key, e.g. 'agent-full' */
  config: string;
  /** what a reader sees, e.g. '+ tools (full agent)' */
  label: string;
  /** which direction scores it: 'chatbot' (cross-format) or 'own' (within-format) */
  direction: 'chatbot' | 'own';
  /** [L+1] */
  perLayer: AurocCI[];
}

export interface TableRow {
  config: string;
  label: string;
  /** ℓ* */
  layer: number;
  /** chatbot direction scoring this configuration (cross-format) */
  cross: AurocCI;
  /** cross − chatbot-on-chatbot, paired */
  crossDiff: DiffCI;
  /** this configuration's own direction (within-format) */
  within: AurocCI;
}

export interface BandJSON {
  /** [L+1] */
  lo: number[];
  /** [L+1] */
  hi: number[];
  reps: number;
  level: number;
}

export interface SchemaCosines {
  /** cos(R_harmful(ℓ), r_chatbot(ℓ)). [L+1] */
  harmful: number[];
  /** cos(R_benign(ℓ), r_chatbot(ℓ)). [L+1] */
  benign: number[];
  /** Gaussian random unit vectors vs r_chatbot */
  randomBand: BandJSON;
  /** label-permuted chatbot direction vs R_harmful */
  permutationBand?: BandJSON;
  /** requests per category */
  n: { harmful: number; benign: number };
  /** which requests R_c averages: every pair (the paper's Eq. 2, default) or the extraction split only */
  pairs?: SchemaDirectionPairs;
}

export type SchemaDirectionPairs = 'all' | 'extraction';
/** ℓ*: 5-fold CV on the extraction split (leakage-free, default) or the layer of peak chatbot AUROC (the paper) */
export type LayerRule = 'cv' | 'peak';

/** Behavioural refusal: generated answers to harmful requests, refusal by the outcome classifier. */
export interface BehaviouralRefusalRow {
  /** 'chatbot' | 'agent' */
  config: string;
  label: string;
  n: number;
  refusals: number;
  /** refusals / n with its Wilson 95 % interval */
  rate: number;
  lo: number;
  hi: number;
}

export interface BehaviouralRefusal {
  /** which requests: the evaluation split's harmful requests */
  requests: string;
  maxNewTokens: number;
  rows: BehaviouralRefusalRow[];
}

export interface FirstTokenSeries {
  category: 'harmful' | 'benign';
  representation: 'schema' | 'flattened';
  n: number;
  /** [L+1] mean projection on the unit chatbot refusal direction */
  mean: number[];
  /** [L+1] sample sd */
  sd: number[];
}

export interface NormSeries {
  name: string;
  /** [L+1] */
  norm: number[];
}

export interface SteeringRow {
  /** strength in residual units as passed to the engine (0 on an intervention-set row: no shorthand on top) */
  alpha: number;
  /** α / mean ‖hidden[ℓ]‖ */
  alphaRelative?: number;
  /** an intervention-set row (`steer --intervene FILE.json`): the file's name; absent on α rows */
  condition?: string;
  /** sha256 of the intervention set's content */
  interventionsSha256?: string;
  n: number;
  counts: { refusal: number; valid: number; invalid: number };
  /**
   * a sampled sweep (`steer --samples K --temperature T`): n = prompts × samples, and the refusal rate over them with
   * a Wilson interval (every answer as independent) and a per-prompt bootstrap interval (prompts resampled, each with
   * all its answers: the one to read, since answers to one prompt are not independent; analysis/sampled-rate.ts)
   */
  sampled?: { prompts: number; samples: number; refusal: { rate: number; wilson: { lo: number; hi: number }; bootstrap: { lo: number; hi: number }; reps: number; seed: number } };
}

/** how a sampled sweep decoded (engine/sample/settings.ts's fields) and its answers per request */
export interface SteeringSampling {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  seed?: number;
  samples: number;
}

export interface SteeringResults {
  layer: number;
  direction: string;
  /** 'harmful' | 'benign' requests */
  requests: string;
  /** which positions were steered: every prompt and generated position (default), or generated tokens only */
  positions?: 'all' | 'generated';
  rows: SteeringRow[];
  /** a sampled sweep's decoding (absent: greedy) */
  sampling?: SteeringSampling;
  /**
   * a sweep by SAE feature (`steer --sae DIR`): the same α along the unit decoder row of the feature with the largest
   * cosine with the direction of the sweep named `of` (absent: the sweep runs along that direction itself)
   */
  feature?: { sae: string; hook: string; index: number; cosine: number; of: string };
}

/** k of n with its 95 % Wilson interval. */
export interface RateCI {
  k: number;
  n: number;
  p: number;
  lo: number;
  hi: number;
}

/** A refusal probe scoring one configuration's evaluation split, next to the chatbot refusal direction (Table 1). */
export interface ProbeAurocRow {
  /** e.g. agent.schema */
  config: string;
  /** probe kind: mean-diff | logistic */
  probe: string;
  /** the configuration the probe was trained on */
  trainedOn: string;
  layer: number;
  /** chatbot refusal direction at the same layer */
  chatbot: AurocCI;
  auroc: AurocCI;
  /** probe − chatbot direction, paired bootstrap */
  diff: DiffCI;
}

/** A probe's decisions at its threshold on the evaluation split of its own configuration. */
export interface ProbeRateRow {
  config: string;
  probe: string;
  layer: number;
  threshold: number;
  /** stated share of benign extraction rows flagged */
  target: number;
  benignFlagged: RateCI;
  harmfulFlagged: RateCI;
}

/** One guard in the comparison (base, SafeKeep, refusal probe, both). */
export interface GuardComparisonRow {
  method: string;
  /** harmful requests refused */
  refusal: RateCI;
  /** AgentHarm Acc: harmful refused + benign handled with a valid target call */
  acc: RateCI;
  /** requests the guard flagged (refusal path taken) */
  flagged: number;
  n: number;
  /** mean latency of the agent call (ms) */
  agentMs: number;
  /** mean latency the guard added inside the request (ms): judge call, probe scoring, or both */
  guardMs: number;
  /** per request: judge calls, guard tokens, added latency p50 / p95 (eval.ts MethodSummary.cost; absent in older results) */
  judgeCalls?: number;
  guardTokens?: number;
  addedMsP50?: number;
  addedMsP95?: number;
}

export interface ProbeSection {
  probes: { kind: string; layer: number; condition: string; threshold: number; target: number; file: string }[];
  auroc: ProbeAurocRow[];
  rates: ProbeRateRow[];
  comparison?: { bench: string; backend: string; probe: string; rows: GuardComparisonRow[]; notes: string[] };
  /** `probe eval --lodo`: probes scored on data sets they never saw, beside the in-distribution numbers */
  lodo?: LodoSection;
}

/** A point estimate with its percentile bootstrap interval. */
export interface LodoEstimate { est: number; lo: number; hi: number }

export interface LodoRow {
  /** the held-out data set the probe is scored on (its test half) */
  test: string;
  /** what the probe was trained on: `<set> (in-distribution)`, another set, or `union of …` */
  train: string;
  inDistribution: boolean;
  kind: 'mean-diff' | 'logistic';
  layer: number;
  auroc: LodoEstimate;
  /** TPR at 1 % FPR on the test set */
  tpr1: LodoEstimate;
  nTest: number;
  nTrain: number;
  testGroups: number;
}

export interface LodoSection {
  rows: LodoRow[];
  sets: { name: string; rows: number; groups: number; dropped?: { n: number; why: string } }[];
  reps: number;
  seed: number;
  layerRule: string;
  /** which kind of model produced the numbers (the planted synthetic model, or a checkpoint of a user's run) */
  model: string;
}

/** A per-task mean with its 95 % normal-approximation interval (mean ± 1.96·sd/√n). */
export interface MeanCI {
  n: number;
  mean: number;
  lo: number;
  hi: number;
}

/** One S³ guard configuration (none, single:<skill>, no-recovery, full) on one task set. */
export interface S3ConfigRow {
  config: string;
  /** tasks */
  n: number;
  /** hazardous component carried out */
  asr: RateCI;
  /** benign component completed */
  benign: RateCI;
  /** guard invocations, recovery signals, extra tokens (guard LLM + refusal prefill), latency (ms): per task */
  gic: MeanCI;
  rsc: MeanCI;
  extraTokens: MeanCI;
  latencyMs: MeanCI;
  /** per task group (injecagent/<setting>/<attack>, agentharm/pair) */
  groups: Record<string, { asr: RateCI; benign: RateCI }>;
}

/** One `safekeep s3 eval` run (the latest per bench). */
/** The S³ task sets, in the order the report shows them. */
export type S3Bench = 'injecagent' | 'agentharm' | 'mixed' | 'air' | 'multistage';
/** air: incident-response cases (src/eval/s3/air-tasks.ts), InjecAgent direct harm with an inverse action on offer;
 * multistage: our suite after S³'s six risk types (data/multistage/, src/eval/s3/multistage-tasks.ts) */
export const S3_BENCHES: readonly S3Bench[] = ['injecagent', 'agentharm', 'mixed', 'air', 'multistage'];

export interface S3Run {
  /** injecagent | agentharm | mixed */
  bench: string;
  backend: string;
  tasks: number;
  /** InjecAgent settings (empty for agentharm) */
  settings: string[];
  guardDecision: boolean;
  mitigation: string;
  configs: S3ConfigRow[];
}

export interface S3Section {
  runs: S3Run[];
}

/** One leading feature of a direction in one condition (src/sae/direction-features.ts). */
export interface SaeFeatureRow {
  index: number;
  /** cos(W_dec[j], direction) */
  cosine: number;
  /** (harmful − benign mean activation in the condition) × W_dec[j]·unit(direction) */
  attribution: number;
  meanDiff: number;
  /** the condition's prompts it is most active on: row key `<pair>:harmful|benign`, activation, prompt snippet */
  top: { key: string; activation: number; text?: string }[];
}

/** `reproduce --sae DIR`: the SAE features of the refusal and Schema Directions in each condition of Figures 3–4. */
export interface SaeFeaturesSection {
  /** where the dictionary was read from */
  sae: string;
  hook: string;
  /** the hidden[] row the SAE reads (= ℓ* unless `note` says otherwise) */
  hiddenRow: number;
  dSae: number;
  /** features per ranking, activating prompts per feature */
  top: number;
  k: number;
  /** the caches, in figure order: name (cache), label, figure, position the activations are read at */
  conditions: { name: string; label: string; figure: string; position: string; n: number }[];
  directions: { name: string; label: string }[];
  /** condition × direction */
  panels: { condition: string; direction: string; byCosine: SaeFeatureRow[]; byAttribution: SaeFeatureRow[] }[];
  /** e.g. the SAE's row is not ℓ* */
  note?: string;
}

export interface AnalysisResults {
  /** format version of this object */
  version: 1;
  model: string;
  /** L+1 (1 in a results shell of an endpoint-only run, which knows no activations) */
  layers: number;
  /** 0 = unknown: a results shell of an endpoint-only run (e.g. `s3 eval --endpoint`) */
  dModel: number;
  /** true for planted/synthetic inputs: the report says so prominently */
  synthetic?: boolean;
  lStar: {
    layer: number;
    /** how it was chosen, e.g. '5-fold CV on the chatbot extraction split' */
    method: string;
    /** the rule that chose it (absent in files written before the rule existed = cv) */
    rule?: LayerRule;
    /** [L+1] mean held-out AUROC (null where not a candidate) */
    cvAuroc: (number | null)[];
  };
  /** groups: the resampled units (scenarios / behavior stems, else pairs) on the chatbot evaluation split */
  bootstrap: { reps: number; seed: number; level: number; groups?: number };
  curves: LayerCurve[];
  table1: TableRow[];
  table2: TableRow[];
  schemaCosines?: SchemaCosines;
  firstToken?: FirstTokenSeries[];
  norms: { directions: NormSeries[]; meanHidden: NormSeries[] };
  steering?: SteeringResults[];
  /** `reproduce --sae DIR`: SAE features of the refusal and Schema Directions per condition of Figures 3–4 */
  saeFeatures?: SaeFeaturesSection;
  /** §3.1: refusal rate of generated answers, chatbot vs agent, on the evaluation split's harmful requests */
  behavioural?: BehaviouralRefusal;
  /** activation refusal probes (`safekeep probe eval`) */
  probe?: ProbeSection;
  /** S³ multi-stage defense evaluations (`safekeep s3 eval`), one run per bench */
  s3?: S3Section;
  /** provenance (model hash, data hash, split, engine version, ...) copied into the report verbatim */
  manifest: Record<string, unknown>;
  notes?: string[];
}

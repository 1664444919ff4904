/** `--shard i/n`, shared by every shardable command's flag table (parsed by util/shard.ts's parseShard). */
import type { FlagDef } from './args.ts';

export const SHARD_FLAG_DEF: FlagDef = {
  name: 'shard', value: 'i/n',
  help: 'run only shard i of n (0-based; token-balanced) into results/<model>/shards/…; then `safekeep merge RESULTS_DIR`',
};

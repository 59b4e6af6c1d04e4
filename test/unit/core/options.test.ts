/**
 * src/options.ts is the one validator of transport options, the
 * negotiation's knobs included (validateNegotiationOptions): one set of rules
 * whether the options come through Transport.create or go to a Negotiator.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_NEGOTIATION_CONFIG } from '../../../machines/negotiation.js';
import { ConfigError } from '../../../src/errors.js';
import { resolveOptions, validateNegotiationOptions } from '../../../src/options.js';
import { Transport } from '../../../src/transport.js';

describe('validateNegotiationOptions', () => {
  it('fills in the defaults and keeps what is given', () => {
    expect(validateNegotiationOptions(undefined)).toEqual(DEFAULT_NEGOTIATION_CONFIG);
    expect(validateNegotiationOptions({ maxTries: 2, ipc: false })).toEqual({ ...DEFAULT_NEGOTIATION_CONFIG, maxTries: 2, ipc: false });
  });

  const bad: Array<[string, Record<string, unknown>]> = [
    ['maxTries', { maxTries: -1 }],
    ['maxTries', { maxTries: 1.5 }],
    ['requestTimeoutMs', { requestTimeoutMs: 0 }],
    ['requestTimeoutMs', { requestTimeoutMs: Infinity }], // a Node timer would fire after 1 ms
    ['confirmTimeoutMs', { confirmTimeoutMs: 2 ** 31 }],
    ['checkTimeoutMs', { checkTimeoutMs: Number.NaN }],
    ['ipc', { ipc: 'yes' }],
    ['sameGpuIpc', { sameGpuIpc: 1 }],
  ];
  for (const [field, o] of bad) {
    it(`refuses ${JSON.stringify(o)} (negotiation.${field}), through resolveOptions too`, () => {
      expect(() => validateNegotiationOptions(o)).toThrow(ConfigError);
      expect(() => validateNegotiationOptions(o)).toThrow(`negotiation.${field}`);
      expect(() => resolveOptions({ negotiation: o })).toThrow(`negotiation.${field}`);
    });
  }

  it('maxTries 0 is valid (the machine gives up at the first GPU send), as a Negotiator built directly takes it', () => {
    expect(validateNegotiationOptions({ maxTries: 0 }).maxTries).toBe(0);
  });

  it('resolveOptions returns the validated negotiation options', () => {
    expect(resolveOptions({ negotiation: { checkTimeoutMs: 10 } }).negotiation).toEqual({ ...DEFAULT_NEGOTIATION_CONFIG, checkTimeoutMs: 10 });
  });
});

/** Issue 23 finding 8: every option is checked at Transport.create, none later from a socket handler. */
describe('staging and cache options are refused at create', () => {
  const bad: Array<[string, Record<string, unknown>, RegExp]> = [
    ['a staging ring over 2 GiB (1 GiB × 5)', { staging: { chunkSize: 2 ** 30, slots: 5 } }, /chunkSize × staging.slots/],
    ['a chunk over 1 GiB', { staging: { chunkSize: 2 ** 31 } }, /staging.chunkSize/],
    ['more slots than STAGE_BEGIN carries', { staging: { slots: 70000 } }, /staging.slots/],
    ['a peer ring bound over 2 GiB', { staging: { maxPeerBytes: 2 ** 32 } }, /staging.maxPeerBytes/],
    ['staging that is not an object', { staging: 5 }, /staging( options)? must be an object/],
    ['cache.maxEntries: -1', { cache: { maxEntries: -1 } }, /maxEntries/],
    ['cache.maxBytes: 1.5', { cache: { maxBytes: 1.5 } }, /maxBytes/],
    ['cache.unlimited with a bound', { cache: { unlimited: true, maxEntries: 3 } }, /unlimited/],
    ['cache that is not an object', { cache: 'big' }, /cache( options)? must be an object/],
  ];
  for (const [what, o, msg] of bad) {
    it(`${what}: ConfigError from resolveOptions and Transport.create`, async () => {
      expect(() => resolveOptions(o)).toThrow(ConfigError);
      expect(() => resolveOptions(o)).toThrow(msg);
      await expect(Transport.create({ ...o, driver: 'sim' })).rejects.toThrow(ConfigError);
    });
  }

  it('the largest valid ring is accepted; the peer bound defaults to the larger of the own ring and 256 MiB', () => {
    expect(resolveOptions({ staging: { chunkSize: 2 ** 30, slots: 2 } }).staging).toEqual({ chunkSize: 2 ** 30, slots: 2, maxPeerBytes: 2 ** 31 });
    expect(resolveOptions({}).staging).toEqual({ chunkSize: 4 << 20, slots: 4, maxPeerBytes: 256 << 20 });
    expect(resolveOptions({ cache: { maxEntries: 0 } }).cache).toEqual({ maxEntries: 0 });
  });
});

/**
 * src/options.ts is the one validator of transport options, the
 * negotiation's knobs included (validateNegotiationOptions): one set of rules
 * whether the options come through Transport.create or go to a Negotiator.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_NEGOTIATION_CONFIG } from '../../../machines/negotiation.js';
import { ConfigError } from '../../../src/errors.js';
import { resolveOptions, validateNegotiationOptions } from '../../../src/options.js';

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

/**
 * Words for a machine's internal names, so that a diagram says what a
 * transition means ("[same GPU]", "/ send IPC_ACK(yes)", "after
 * requestTimeoutMs") rather than how the code spells it. Names a vocabulary
 * does not know are still drawn: guards as their camelCase split into words,
 * delays by name; actions without a word are left out (they only update
 * context).
 */
export interface Vocabulary {
  /** Guard name → condition in words. */
  guards: Readonly<Record<string, string>>;
  /**
   * Guard name → its negation in words, for the branches after it: "IPC_ACK
   * [my attempt and no]" rather than a bare "[my attempt]" that only reads
   * right once the earlier branch is known. Default: 'not <words>'.
   */
  negated?: Readonly<Record<string, string>>;
  /** Action name → what it does that a reader must see (sending frames). */
  actions: Readonly<Record<string, string>>;
  /** Delay name → the option that sets it. */
  delays: Readonly<Record<string, string>>;
}

export const EMPTY_VOCABULARY: Vocabulary = { guards: {}, negated: {}, actions: {}, delays: {} };

/** The negotiation machine (machines/negotiation.ts). */
export const NEGOTIATION_VOCABULARY: Vocabulary = {
  guards: {
    ipcDisabled: 'IPC off',
    triesExhausted: 'tries used up',
    answersMyRequest: 'my attempt',
    ackSaysOk: 'ok',
    confirmsMyAnswer: 'my attempt',
    localWinsTie: 'my id is lower',
    peerHasNoDevice: 'peer names no device',
    sameDevice: 'same GPU',
    sameGpuIpcAllowed: 'same-GPU IPC on',
    isReady: 'ready',
    hasPeerAccess: 'peer access',
  },
  negated: {
    ipcDisabled: 'IPC on',
    triesExhausted: 'tries left',
    ackSaysOk: 'no',
    localWinsTie: "peer's id is lower",
    sameGpuIpcAllowed: 'same-GPU IPC off',
    isReady: 'not ready',
    hasPeerAccess: 'no peer access',
  },
  actions: {
    sendRequest: 'send IPC_REQ',
    sendNotReady: 'send IPC_NOTREADY',
    answerYes: 'send IPC_ACK(yes)',
    answerNo: 'send IPC_ACK(no)',
    sendConfirm: 'send IPC_CONFIRM',
    sendAbort: 'send IPC_ABORT',
    countIgnored: 'ignore',
  },
  delays: {
    requestTimeout: 'requestTimeoutMs',
    confirmTimeout: 'confirmTimeoutMs',
    checkTimeout: 'checkTimeoutMs',
  },
};

/** 'answersMyRequest' → 'answers my request'. */
export function camelToWords(name: string): string {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1 $2')
    .toLowerCase();
}

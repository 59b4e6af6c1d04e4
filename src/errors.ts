/**
 * Every error smcuda raises is one of these classes. Each carries a stable
 * `code` (for programs) and a message that says what to do (for people).
 */

/**
 * The base class of smcuda's errors: `code` is stable (docs/errors.md lists
 * every one), the message says what to do. `instanceof SmcudaError` also
 * holds for ArgumentTypeError and ArgumentRangeError.
 */
export class SmcudaError extends Error {
  /** A stable `SMCUDA_*` code (docs/errors.md); for CudaError, the CUDA error name. */
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
  }

  /**
   * `err instanceof SmcudaError` also holds for the argument errors
   * (ArgumentTypeError, ArgumentRangeError): they extend TypeError and
   * RangeError, as Node's own argument errors do, so they cannot extend this
   * class, yet every error smcuda raises is one `catch (e) { if (e instanceof SmcudaError) … }` away.
   */
  static override [Symbol.hasInstance](value: unknown): boolean {
    // biome-ignore lint/complexity/noThisInStatic: `this` is the class the check is made against, a subclass included
    if (Function.prototype[Symbol.hasInstance].call(this, value)) return true;
    // biome-ignore lint/complexity/noThisInStatic: only SmcudaError itself takes in the argument errors, not its subclasses
    return this === SmcudaError && (value instanceof ArgumentTypeError || value instanceof ArgumentRangeError);
  }
}

/**
 * An argument of the wrong type (a number where a bigint pointer goes, a
 * string where a buffer goes). Checked in JS before any driver call. A
 * TypeError (as Node's ERR_INVALID_ARG_TYPE is), with `code`
 * 'SMCUDA_INVALID_ARG_TYPE'; `instanceof SmcudaError` holds too.
 */
export class ArgumentTypeError extends TypeError {
  readonly code = 'SMCUDA_INVALID_ARG_TYPE';
  // `name` stays 'TypeError', as Node's coded errors keep theirs.
}

/**
 * An argument of the right type but out of range (a negative size, a tag
 * past 2^32-1, a length past the end of its allocation). A RangeError (as
 * Node's ERR_OUT_OF_RANGE is), with `code` 'SMCUDA_OUT_OF_RANGE';
 * `instanceof SmcudaError` holds too.
 */
export class ArgumentRangeError extends RangeError {
  readonly code = 'SMCUDA_OUT_OF_RANGE';
  // `name` stays 'RangeError', as Node's coded errors keep theirs.
}

/**
 * A CUDA driver call failed. `code` is the CUDA error name
 * (e.g. 'CUDA_ERROR_ALREADY_MAPPED'), `call` the driver function, `result`
 * the numeric CUresult.
 */
export class CudaError extends SmcudaError {
  readonly call: string;
  readonly result: number;
  constructor(call: string, code: string, result: number, detail?: string) {
    super(code, `${call} failed: ${code} (${result})${detail ? `: ${detail}` : ''}`);
    this.call = call;
    this.result = result;
  }
}

/** The native addon could not be loaded; the message lists every cause found and its fix. */
export class AddonLoadError extends SmcudaError {
  readonly causes: string[];
  constructor(causes: string[]) {
    super('SMCUDA_ADDON_LOAD', ['Could not load the smcuda native addon.', ...causes.map((c) => `  - ${c}`)].join('\n'));
    this.causes = causes;
  }
}

/** A peer sent a frame that does not decode or is not allowed now; the endpoint is closed. */
export class ProtocolError extends SmcudaError {
  constructor(message: string, code = 'SMCUDA_PROTOCOL') {
    super(code, message);
  }
}

/** The peer of an endpoint went away (closed, crashed, timed out); pending operations reject with this. */
export class PeerLostError extends SmcudaError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('SMCUDA_PEER_LOST', message, options);
  }
}

/** The endpoint or transport was closed locally while the operation was pending. */
export class ClosedError extends SmcudaError {
  constructor(message: string) {
    super('SMCUDA_CLOSED', message);
  }
}

/** Bad configuration or usage that is not a simple argument type error. */
export class ConfigError extends SmcudaError {
  constructor(message: string) {
    super('SMCUDA_CONFIG', message);
  }
}

/** A message did not fit the receive buffer, or similar receive-side mismatch. */
export class TruncationError extends SmcudaError {
  constructor(message: string) {
    super('SMCUDA_TRUNCATED', message);
  }
}

/** The requested CUDA driver cannot be used here (no libcuda, no device, no addon); the message says why and what to do. */
export class DriverUnavailableError extends SmcudaError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('SMCUDA_DRIVER_UNAVAILABLE', message, options);
  }
}

/** A connection was refused: another user's process, a directory others can enter, a wrong job token. */
export class AccessDeniedError extends SmcudaError {
  constructor(message: string, code = 'SMCUDA_ACCESS_DENIED') {
    super(code, message);
  }
}

/** The peer could not prove that it knows the job token (handshake PROOF missing or wrong): refused, on either side. */
export class BadTokenError extends AccessDeniedError {
  constructor(message: string) {
    super(message, 'SMCUDA_BAD_TOKEN');
  }
}

/** Nothing accepts connections at the path given to connect (no socket file, or its process exited). */
export class NoListenerError extends SmcudaError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('SMCUDA_NO_LISTENER', message, options);
  }
}

/**
 * A file descriptor could not be passed between processes. `code`:
 * 'SMCUDA_FD_EMFILE' — this process had no free descriptor slot, so the
 * kernel dropped the descriptor that came with `meta` (raise `ulimit -n`, or
 * fewer cached imports); 'SMCUDA_FD_CHANNEL' — the descriptor channel failed
 * or carried a message it must not (too long, several descriptors).
 */
export class DescriptorError extends SmcudaError {
  /** The message the lost descriptor came with, where known. */
  readonly meta: Uint8Array | undefined;
  constructor(code: 'SMCUDA_FD_EMFILE' | 'SMCUDA_FD_CHANNEL', message: string, options?: { cause?: unknown; meta?: Uint8Array }) {
    super(code, message, options);
    this.meta = options?.meta;
  }
}

/**
 * A peer would make this endpoint hold more for it than the endpoint's bound
 * allows. 'SMCUDA_PEER_BUFFER_LIMIT': unexpected messages and partly arrived
 * frames over `maxBufferedBytes`; that endpoint closes with it (every pending
 * operation on it rejects), the transport's other endpoints carry on.
 * 'SMCUDA_PEER_FD_LIMIT': a descriptor past `maxPeerDescriptors`, closed at
 * once; the message it came for goes by staging, with this as the reason.
 */
export class PeerLimitError extends SmcudaError {
  constructor(code: 'SMCUDA_PEER_BUFFER_LIMIT' | 'SMCUDA_PEER_FD_LIMIT', message: string) {
    super(code, message);
  }
}

/**
 * A shared-memory segment (control ring, staging ring, simulated device
 * memory) could not be created for lack of room in /dev/shm (a container's
 * default is 64 MiB). The message names the directory, its size and free
 * space, what was asked for, and the option that shrinks it.
 */
export class ShmSpaceError extends SmcudaError {
  constructor(
    message: string,
    readonly dir: string,
    readonly requested: number,
    /** Size and free bytes of `dir` (undefined where they cannot be read). */
    readonly size: number | undefined,
    readonly free: number | undefined,
    options?: { cause?: unknown },
  ) {
    super('SMCUDA_SHM_FULL', message, options);
  }
}

/**
 * A buffer object (`{ ptr, length, device }`) that a call cannot use:
 * 'SMCUDA_BUFFER_FREED' — it was freed (by `free()`, `memFree`, the
 * communicator that made it closing, or its driver closing);
 * 'SMCUDA_BUFFER_DEVICE' — it is memory of another device than the one the
 * call runs on. Checked in JS before anything is queued.
 */
export class DeviceBufferError extends SmcudaError {
  constructor(code: 'SMCUDA_BUFFER_FREED' | 'SMCUDA_BUFFER_DEVICE', message: string) {
    super(code, message);
  }
}

/**
 * A registration or a persistent transfer failed (src/persistent/). `code`:
 * SMCUDA_PERSISTENT_STUCK (a flag did not move within the watchdog's time:
 * the peer is gone, stopped replaying, or replayed a different number of
 * rounds), SMCUDA_PERSISTENT_PEER_FAILED (the peer failed its half),
 * SMCUDA_PERSISTENT_CLOSED (the transfer, its registration or its endpoint
 * was closed), SMCUDA_PERSISTENT_MISMATCH (the two sides' calls do not
 * match), SMCUDA_PERSISTENT_UNSUPPORTED (the driver or the peer cannot).
 * Once failed, a transfer stays failed: create a new one.
 */
export class PersistentTransferError extends SmcudaError {}

/**
 * A communicator was aborted: one of its ranks failed (an error in a call,
 * a lost or closed process, a timeout, calls that differ between ranks), and
 * every pending and later call of every rank fails with this error.
 * `failedRank` is the rank that failed first, `failedPid` its process id
 * where known, `causeCode` the code of its original error (the original
 * error itself is `cause` on the rank where it happened). Create a new
 * communicator.
 */
export class CommunicatorAbortedError extends SmcudaError {
  constructor(
    message: string,
    readonly failedRank: number,
    readonly causeCode: string,
    options?: { cause?: unknown; failedPid?: number; code?: string },
  ) {
    super(options?.code ?? 'SMCUDA_COMM_ABORTED', message, options);
    if (options?.failedPid !== undefined) this.failedPid = options.failedPid;
  }
  /** The process id of the rank that failed first, where it is known. */
  readonly failedPid: number | undefined;
  /** On the rank that reports it: its flight recorder's summary of its last calls (what was in flight). */
  flight: string | undefined;
  /** Where this rank's flight records were written (tracing configured: SMCUDA_TRACE or the trace option). */
  flightFile: string | undefined;
}

/**
 * The ranks of a communicator made different calls at the same point
 * (another collective, dtype, count, root or reduction op): the call fails
 * on every rank, and the communicator is aborted, so
 * no rank computes with mismatched buffers. `ranks` are the two ranks
 * compared, `fields` what differs; the message shows both calls.
 */
export class CallMismatchError extends CommunicatorAbortedError {
  constructor(
    message: string,
    failedRank: number,
    readonly seq: number,
    readonly ranks: readonly number[],
    readonly fields: readonly string[],
    options?: { cause?: unknown; failedPid?: number },
  ) {
    super(message, failedRank, 'SMCUDA_CALL_MISMATCH', { ...options, code: 'SMCUDA_CALL_MISMATCH' });
  }
}

/** A collective or barrier did not complete within its timeout (per call or the communicator's); the communicator is aborted. */
export class CommunicatorTimeoutError extends SmcudaError {
  constructor(message: string) {
    super('SMCUDA_COMM_TIMEOUT', message);
  }
}

/**
 * A send and the receive it matches (the n-th send from a rank to a peer,
 * the peer's n-th receive from it) differ in count or dtype: the
 * communicator aborts on every rank with this cause ('SMCUDA_P2P_MISMATCH').
 */
export class P2PMismatchError extends SmcudaError {
  constructor(
    message: string,
    /** The pair's sequence number of the two calls. */
    readonly n: number,
    /** [sender, receiver]. */
    readonly ranks: readonly [number, number],
    readonly fields: readonly string[],
  ) {
    super('SMCUDA_P2P_MISMATCH', message);
  }
}

/**
 * An NCCL call failed (src/nccl/). `code` is SMCUDA_NCCL_ and NCCL's result
 * in capitals (SMCUDA_NCCL_INVALID_ARGUMENT, SMCUDA_NCCL_REMOTE_ERROR, …;
 * SMCUDA_NCCL_TIMEOUT also for a communicator not ready within its time),
 * `call` the NCCL function, `result` the ncclResult_t, `detail` NCCL's
 * words for it and `lastError` what ncclGetLastError said.
 */
export class NcclError extends SmcudaError {
  constructor(
    code: string,
    message: string,
    readonly call: string,
    readonly result: number,
    readonly detail = '',
    readonly lastError = '',
  ) {
    super(code, message);
  }
}

/**
 * NCCL cannot be used here: no libnccl.so.2 was found or loaded
 * ('SMCUDA_NCCL_UNAVAILABLE': the message lists where it looked, why each
 * failed, and what to install), or the NCCL loaded lacks the entry point a
 * call needs ('SMCUDA_NCCL_UNSUPPORTED'). Only the features that need NCCL fail.
 */
export class NcclUnavailableError extends SmcudaError {
  constructor(
    message: string,
    code: 'SMCUDA_NCCL_UNAVAILABLE' | 'SMCUDA_NCCL_UNSUPPORTED' = 'SMCUDA_NCCL_UNAVAILABLE',
    readonly looked: readonly string[] = [],
  ) {
    super(code, message);
  }
}

/**
 * The TCP store of a rendezvous across machines failed (src/collectives/tcp-store.ts).
 * `code`: SMCUDA_STORE_TIMEOUT (no answer, the store not reachable, or a
 * key not set within the timeout), SMCUDA_STORE_LOST (the connection to
 * the store closed: rank 0 gone), SMCUDA_STORE_REFUSED (the store refused
 * a request over its limits). A wrong job token is a BadTokenError.
 */
export class StoreError extends SmcudaError {
  constructor(code: 'SMCUDA_STORE_TIMEOUT' | 'SMCUDA_STORE_LOST' | 'SMCUDA_STORE_REFUSED', message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }
}

import type { Pool, PoolClient } from 'pg'

/** How far a signed timestamp may be from the receiver's clock, either way, in seconds. */
export const TOLERANCE_SECONDS: 300
/** The event type of a conformance run's deliveries. */
export const TEST_EVENT_TYPE: 'guardian.connector.test'
/** The prefix of every key a conformance run sends. */
export const TEST_KEY_PREFIX: 'gtest_'
/** The largest request Guardian sends under its default intake cap. */
export const DEFAULT_MAX_BODY: number

export type StatusName = 'done' | 'not_done' | 'in_progress' | 'declined' | 'mismatch'
export const Status: Readonly<{ DONE: 'done'; NOT_DONE: 'not_done'; IN_PROGRESS: 'in_progress'; DECLINED: 'declined'; MISMATCH: 'mismatch' }>

/** A receiver's word about one key. */
export interface Statement {
  idempotency_key: string
  status: StatusName
  reason?: string
  receipt?: string
}

/** The purchase Guardian sends with an action (an actions file's deployments). */
export interface Purchase {
  provider: string
  id: string
  kind?: 'one_time' | 'subscription_start' | 'renewal'
  amount?: number
  currency?: string
  items?: { product?: string; price?: string; quantity?: number }[]
  metadata?: Record<string, string>
  customer?: { id?: string; email?: string }
  mode?: 'live' | 'test'
}

/** One request from Guardian, as the handler sees it. */
export interface Delivery {
  idempotencyKey: string
  provider: string
  paymentId: string
  eventId: string
  eventType: string
  /** "revoke" takes the payment back; "" fulfils. */
  action: '' | 'revoke'
  /** The action of the purchase this request performs ("" without an actions file). */
  actionName: string
  purchase: Purchase | null
  /** The provider's event, parsed. */
  payload: unknown
  /** Guardian's attempt number for the key (1 first); the body is the same for every attempt. */
  attempt: number
  /** A conformance run's delivery: never given to the handler. */
  test: boolean
}

/**
 * Performs the action for one delivery through client, inside the
 * transaction that records its key: a write through client happens exactly
 * once. Resolve when done; throw Decline to decline the key for good; throw
 * anything else to fail without recording anything (Guardian's next attempt
 * runs it again). An action outside the database (an API call) is not
 * covered by the transaction: give it the key as its own idempotency key.
 */
export type Handler = (delivery: Delivery, client: PoolClient) => Promise<void>

export interface ReceiverOptions {
  pool: Pool
  /** Connector secrets (whsec_...): any verifies; answers are signed with the first. */
  secrets: string[]
  handler: Handler
  /** Caps a request's body; default DEFAULT_MAX_BODY. */
  maxBody?: number
  /** The clock, in Unix seconds. */
  now?: () => number
  logger?: { warn: (message: string) => void; error: (message: string, err?: unknown) => void }
}

/** A handler's decision to decline its key for good. */
export class Decline extends Error {
  constructor(reason: string)
  readonly reason: string
}

/** Guardian's receiver on web-standard Request and Response. */
export class Receiver {
  constructor(options: ReceiverOptions)
  /** Answers one request from Guardian: POST acts, GET looks a key up (its last path segment). */
  handle(request: Request): Promise<Response>
}

export function decodeSecret(secret: string): Buffer
export function sign(secret: string, msgId: string, timestamp: number | string, body: string | Buffer): string
export function verify(
  secrets: string[],
  headers: Headers | Record<string, string | string[] | undefined>,
  body: string | Buffer,
  now: number,
): boolean
export function signStatement(secret: string, statement: Statement, now: number): { body: string; headers: Record<string, string> }
/** The SQL that creates the kit's table (idempotent). */
export function schema(): Promise<string>
/** Creates the kit's table if it does not exist. */
export function migrate(pool: Pool): Promise<void>

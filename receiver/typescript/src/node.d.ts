import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Receiver } from './index.js'

/** A node:http request listener answering Guardian with receiver. */
export function toNodeHandler(receiver: Receiver): (req: IncomingMessage, res: ServerResponse) => Promise<void>
/** A web-standard Request of a Node request; body, when given, is its bytes already read. */
export function toRequest(req: IncomingMessage, body?: Buffer): Request
/** Writes a web-standard Response to a Node response. */
export function writeResponse(res: ServerResponse, response: Response): Promise<void>

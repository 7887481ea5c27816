import type { Receiver } from './index.js'

/** The route handlers answering Guardian with receiver: POST acts, GET looks a key up. */
export function routeHandlers(receiver: Receiver): { POST: (request: Request) => Promise<Response>; GET: (request: Request) => Promise<Response> }
